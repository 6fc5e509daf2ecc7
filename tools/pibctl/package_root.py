"""A stock Debian root to install ./pib package's packages into, as a user
would in a guest of theirs: the trixie root of buildroot.py, with DKMS,
the stock kernel's headers and trixie's rdma-core. Kept in the cache;
each test installs into a fresh copy of it."""

import urllib.request
from pathlib import Path

from pibctl import buildroot, sources, stamps, ui

# Debian's libibverbs1 65 (sid): the newer provider build is resolved
# against it. Pinned like the source tarballs.
LIBIBVERBS_65 = ("pool/main/r/rdma-core/libibverbs1_65.0-1.1_amd64.deb",
                 "de960e34425301d883d23d0210726f4ddac28fe19f0b468e1a403beb7b09f221")


def root() -> Path:
    """The pristine root: the stock trixie root every check shares."""
    return buildroot.base()


def ensure() -> Path:
    return buildroot.ensure_base()


def fresh_copy(dest: Path) -> Path:
    """A copy of the pristine root at `dest` (which must not exist)."""
    return buildroot.copy_root(ensure(), dest)


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
