"""The guest kernel driver: built against the guest kernel's headers, which
are unpacked from Debian's packages into the cache (never installed on the
host), in a build directory outside the clone."""

import shutil
import tempfile
from pathlib import Path

from pibctl import paths, sources, stamps, ui

DRIVER_DIR = paths.REPO / "guest-driver"
SHARED_HEADERS = [paths.REPO / "include" / "pib_hw.h", paths.REPO / "include" / "pib_user_abi.h"]


def _headers_root(release: str) -> Path:
    return paths.cache_dir() / "kernel-headers" / release


def fetch_headers(release: str) -> Path:
    """Returns the kernel build directory (KDIR) for `release`."""
    root = _headers_root(release)
    kdir = root / "usr" / "src" / f"linux-headers-{release}"
    version = release.removesuffix("-amd64")
    packages = [f"linux-headers-{release}", f"linux-headers-{version}-common",
                f"linux-kbuild-{version}"]
    key = ",".join(packages)
    if stamps.is_current("kernel-headers", key) and (kdir / "Makefile").is_file():
        return kdir
    ui.detail(f"kernel headers {release}: downloading")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=sources.downloads()) as tmp:
        ui.run_logged(["apt-get", "download", *[f"{p}/{sources.KERNEL_RELEASE}" for p in packages]],
                      "driver", "apt-get download", cwd=tmp)
        for deb in sorted(Path(tmp).glob("*.deb")):
            ui.run_logged(["dpkg-deb", "-x", deb, root], "driver", "unpacking headers")
    # The arch package's Makefile includes the common one by absolute path.
    common = root / "usr" / "src" / f"linux-headers-{version}-common" / "Makefile"
    (kdir / "Makefile").write_text(f"include {common}\n")
    stamps.mark("kernel-headers", key)
    return kdir


def build(release: str) -> Path:
    """Builds pib.ko for `release`; returns its path."""
    kdir = fetch_headers(release)
    build_dir = paths.cache_dir() / "build" / "guest-driver"
    ko = build_dir / "pib.ko"
    sources_ = [p for p in DRIVER_DIR.iterdir() if p.is_file()] + SHARED_HEADERS
    key = stamps.hash_files(sources_, release)
    if stamps.is_current("guest-driver", key) and ko.is_file():
        ui.detail("guest driver: up to date")
        return ko
    if build_dir.exists():
        shutil.rmtree(build_dir)
    shutil.copytree(DRIVER_DIR, build_dir)
    (build_dir / "include").mkdir()
    for h in SHARED_HEADERS:
        shutil.copy2(h, build_dir / "include" / h.name)
    # No pahole here: build without BTF; the module loads the same.
    ui.run_logged(["make", "-C", kdir, f"M={build_dir}", "CONFIG_DEBUG_INFO_BTF_MODULES=",
                   "-j2", "modules"], "driver", "building pib.ko")
    stamps.mark("guest-driver", key)
    ui.detail(f"guest driver: {ko}")
    return ko
