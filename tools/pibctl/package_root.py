"""A stock Debian root to install ./pib package's packages into, as a user
would in a guest of theirs: trixie made with debootstrap, with DKMS, the
stock kernel's headers and trixie's rdma-core. Kept in the cache; each
test installs into a fresh copy of it."""

import shutil
import subprocess
import urllib.request
from pathlib import Path

from pibctl import buildroot, paths, sources, stamps, ui

SUITE = "trixie"
PACKAGES = ["dkms", "linux-headers-amd64", "libibverbs1", "ibverbs-utils"]
# Debian's libibverbs1 65 (sid): the newer provider build is resolved
# against it. Pinned like the source tarballs.
LIBIBVERBS_65 = ("pool/main/r/rdma-core/libibverbs1_65.0-1.1_amd64.deb",
                 "de960e34425301d883d23d0210726f4ddac28fe19f0b468e1a403beb7b09f221")


def root() -> Path:
    return paths.cache_dir() / "buildroot" / f"{SUITE}-packages"


def ensure() -> Path:
    """The pristine root: made once (a few minutes), then cached."""
    key = stamps.hash_files([], f"{SUITE}:{','.join(PACKAGES)}")
    if stamps.is_current("package-root", key) and (root() / "usr/sbin/dkms").is_file():
        return root()
    if root().exists():
        shutil.rmtree(root())
    root().parent.mkdir(parents=True, exist_ok=True)
    ui.detail(f"package test root: debootstrap {SUITE}, then {', '.join(PACKAGES)}")
    ui.run_logged(["debootstrap", "--variant=minbase", SUITE, root(), buildroot.MIRROR],
                  "package-root", "debootstrap")
    buildroot.run_in(root(), ["apt-get", "update", "-q"], "package-root", "apt-get update")
    buildroot.run_in(root(), ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                              *PACKAGES], "package-root", "apt-get install")
    buildroot.run_in(root(), ["apt-get", "clean"], "package-root", "apt-get clean")
    stamps.mark("package-root", key)
    return root()


def fresh_copy(dest: Path) -> Path:
    """A copy of the pristine root at `dest` (which must not exist)."""
    subprocess.run(["cp", "-a", "--reflink=auto", str(ensure()), str(dest)], check=True)
    return dest


def kernel_release(where: Path) -> str:
    """The stock kernel whose headers the root holds (say 6.12.57+deb13-amd64)."""
    found = sorted(p.name.removeprefix("linux-headers-")
                   for p in (where / "usr" / "src").glob("linux-headers-*-amd64"))
    if len(found) != 1:
        raise ui.StepFailed(f"the package test root holds headers for {found or 'no kernel'}")
    return found[0]


def libibverbs_65() -> Path:
    """Debian's libibverbs1 65 package (downloaded once, SHA-256 checked)."""
    path, sha256 = LIBIBVERBS_65
    target = sources.downloads() / Path(path).name
    if target.is_file() and stamps.sha256_file(target) == sha256:
        return target
    tmp = target.with_suffix(".tmp")
    with urllib.request.urlopen(f"{buildroot.MIRROR}/{path}", timeout=120) as answer:
        tmp.write_bytes(answer.read())
    if stamps.sha256_file(tmp) != sha256:
        tmp.unlink()
        raise ui.StepFailed(f"{path}: SHA-256 does not match the pinned {sha256}")
    tmp.rename(target)
    return target
