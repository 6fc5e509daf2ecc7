"""Source tarballs and the guest kernel, fetched from Debian and verified."""

import os
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pibctl import buildroot, paths, stamps, ui

MIRROR = "http://deb.debian.org/debian"


@dataclass(frozen=True)
class Tarball:
    package: str
    release: str
    filename: str
    sha256: str
    version: str = ""  # a source version other than the release's newest
    # Fetched from the mirror's pool by name (no deb-src line names its
    # release: bookworm's sources are not in ./pib setup's list).
    from_pool: bool = False


QEMU = Tarball(
    "qemu",
    "bookworm-backports",
    "qemu_10.0.2+ds.orig.tar.xz",
    "0901da33844a331bf8b3602b9c1fbd178e60b737c8e3ade678255bd090c9b9f1",
)
# The newest QEMU whose source Debian's mirror serves (sid also lists
# 11.1.x, but its tarballs are not on the mirror): ./pib test builds the
# ./pib qemu-patches series into it too.
QEMU_NEWEST = Tarball(
    "qemu",
    "sid",
    "qemu_10.2.2+ds.orig.tar.xz",
    "be05230fe47a6937cd29f28f562932c8125f9c93c2a82c625198f7a4aa601dfb",
    version="1:10.2.2+ds-1",
)
RDMA_CORE = Tarball(
    "rdma-core",
    "trixie",
    "rdma-core_56.1.orig.tar.gz",
    "63ce7f2baa7242c2dbc76375dac957c420187dd27f8c5e148efc07971ee522a8",
)
# The newest rdma-core in Debian's archives: the provider is also built
# against it, with its own private ABI, and a guest loads that build.
RDMA_CORE_NEWEST = Tarball(
    "rdma-core",
    "sid",
    "rdma-core_65.0.orig.tar.gz",
    "f6ba3d8b2c4aa334c5c883c1ad0772de339011123cff4fb1db32ae7a443fb7ca",
)

# The peers' suites (peers_build.py). libfabric's source carries fabtests;
# it is the version the guests' libfabric1 is. The UCX whose source is on
# the mirror with its tests is bookworm's (trixie's 1.18.1+ds is not), and
# Debian's packaging is needed to configure it (undo-upstream.patch).
LIBFABRIC = Tarball(
    "libfabric",
    "trixie",
    "libfabric_2.1.0.orig.tar.xz",
    "1a66369772d5bb151737214af1c478993e969cf298e8f9ed369e7a2ab8d8c6df",
)
UCX = Tarball(
    "ucx",
    "bookworm",
    "ucx_1.13.1.orig.tar.xz",
    "1a88e09ca1b406c046a469c2ae271d2c330050b5664c0bcd9890e26c6ef09f3c",
    from_pool=True,
)
UCX_DEBIAN = Tarball(
    "ucx",
    "bookworm",
    "ucx_1.13.1-1.debian.tar.xz",
    "e0a407539b44d3aa81e3f11fc43a3ad512550944a59227e2105317446fd2e0ff",
    from_pool=True,
)

# The newest kernel Debian offers. Its headers' tools and its compiler
# need trixie's glibc, so its driver is built, and its image package
# fetched, in the trixie build root (buildroot.py).
LATEST = "latest"

# The guest kernels an image can be built with (./pib setup --kernel):
# name -> the Debian suite whose linux-image-amd64 and linux-headers-amd64
# name it. The driver is built for the chosen one and compile-checked
# against the others (./pib test).
GUEST_KERNELS = {
    "6.12": "bookworm-backports",  # the default
    "6.1": "bookworm",  # Debian 12's own
    LATEST: buildroot.BACKPORTS,  # 7.x
}
DEFAULT_KERNEL = "6.12"


def selected_kernel() -> str:
    """The guest kernel chosen with --kernel (PIB_KERNEL), else the default."""
    name = os.environ.get("PIB_KERNEL", DEFAULT_KERNEL)
    if name not in GUEST_KERNELS:
        raise ui.StepFailed(f"unknown guest kernel {name!r}; choose one of {', '.join(GUEST_KERNELS)}")
    return name


def kernel_suite(name: str = "") -> str:
    return GUEST_KERNELS[name or selected_kernel()]


def downloads() -> Path:
    d = paths.cache_dir() / "downloads"
    d.mkdir(parents=True, exist_ok=True)
    return d


def fetch(tarball: Tarball) -> Path:
    """Returns the verified tarball, downloading it if needed."""
    target = downloads() / tarball.filename
    if target.is_file() and stamps.sha256_file(target) == tarball.sha256:
        ui.detail(f"{tarball.filename}: cached, SHA-256 verified")
        return target
    if tarball.from_pool:
        return _fetch_from_pool(tarball, target)
    ui.detail(f"{tarball.filename}: downloading with apt-get source")
    with tempfile.TemporaryDirectory(dir=downloads()) as tmp:
        # The .dsc and .debian.tar.xz of these versions are not always on
        # the mirror; only the upstream tarball matters, so the exit status
        # is ignored and the tarball is checked by its hash instead.
        subprocess.run(
            ["apt-get", "source", "--download-only",
             f"{tarball.package}={tarball.version}" if tarball.version
             else f"{tarball.package}/{tarball.release}"],
            cwd=tmp,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        got = Path(tmp) / tarball.filename
        if not got.is_file():
            raise ui.StepFailed(
                f"apt-get source {tarball.package}/{tarball.release} did not provide "
                f"{tarball.filename}; is the deb-src line for {tarball.release} reachable?"
            )
        digest = stamps.sha256_file(got)
        if digest != tarball.sha256:
            raise ui.StepFailed(
                f"{tarball.filename}: SHA-256 {digest} does not match the pinned {tarball.sha256}"
            )
        shutil.move(got, target)
    ui.detail(f"{tarball.filename}: SHA-256 verified")
    return target


def _fetch_from_pool(tarball: Tarball, target: Path) -> Path:
    """`tarball` from the mirror's pool, verified by its pinned hash."""
    prefix = tarball.package[:4] if tarball.package.startswith("lib") else tarball.package[0]
    url = f"{MIRROR}/pool/main/{prefix}/{tarball.package}/{tarball.filename}"
    ui.detail(f"{tarball.filename}: downloading {url}")
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as got, open(partial, "wb") as out:
            shutil.copyfileobj(got, out)
    except OSError as e:
        raise ui.StepFailed(f"{url}: {e}") from None
    digest = stamps.sha256_file(partial)
    if digest != tarball.sha256:
        partial.unlink()
        raise ui.StepFailed(
            f"{tarball.filename}: SHA-256 {digest} does not match the pinned {tarball.sha256}")
    partial.rename(target)
    return target


def guest_kernel_package(name: str = "") -> str:
    """The versioned image package linux-image-amd64 points at in the
    suite of kernel `name` (by default the selected one)."""
    if (name or selected_kernel()) == LATEST:
        buildroot.ensure()
        return f"linux-image-{buildroot.kernel_release()}"
    suite = kernel_suite(name)
    out = ui.run_quiet(["apt-cache", "depends", f"linux-image-amd64/{suite}"])
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("Depends: linux-image-"):
            return line.split(":", 1)[1].strip()
    raise ui.StepFailed(f"cannot resolve linux-image-amd64 in {suite}: {out.strip()}")


def fetch_guest_kernel(name: str = "") -> tuple[str, Path]:
    """Returns (kernel release, directory with boot/ and lib/modules/) of
    kernel `name` (by default the selected one)."""
    name = name or selected_kernel()
    package = guest_kernel_package(name)
    release = package.removeprefix("linux-image-")
    root = paths.cache_dir() / "kernel" / release
    stamp = f"kernel-{release}"
    if stamps.is_current(stamp, package) and (root / "boot" / f"vmlinuz-{release}").is_file():
        ui.detail(f"guest kernel {release}: cached")
        return release, root
    ui.detail(f"guest kernel {release}: downloading {package}")
    with tempfile.TemporaryDirectory(dir=downloads()) as tmp:
        if name == LATEST:
            buildroot.download_kernel_image(Path(tmp))
        else:
            ui.run_logged(["apt-get", "download", f"{package}/{kernel_suite(name)}"], "kernel", cwd=tmp)
        debs = sorted(Path(tmp).glob("*.deb"))
        if not debs or (name != LATEST and len(debs) != 1):
            raise ui.StepFailed(f"apt-get download {package} produced {len(debs)} files")
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        for deb in debs:
            ui.run_logged(["dpkg-deb", "-x", deb, root], "kernel", "unpacking the kernel")
    _classic_layout(root, release)
    # The package leaves modules.dep to its postinst; make it here.
    ui.run_logged(["depmod", "-b", root, release], "kernel", "depmod")
    stamps.mark(stamp, package)
    return release, root


def _classic_layout(root: Path, release: str) -> None:
    """Debian's 7.x kernels live in /usr/lib/modules/RELEASE, vmlinuz and
    config included: lay them out as the older ones are (lib/modules/,
    boot/vmlinuz-RELEASE, boot/config-RELEASE), which the rest expects."""
    merged = root / "usr" / "lib" / "modules" / release
    classic = root / "lib" / "modules" / release
    if merged.is_dir() and not classic.exists():
        classic.parent.mkdir(parents=True)
        merged.rename(classic)
    for name in ("vmlinuz", "config", "System.map"):
        inside = classic / name
        if inside.is_file():
            (root / "boot").mkdir(exist_ok=True)
            shutil.copy2(inside, root / "boot" / f"{name}-{release}")
