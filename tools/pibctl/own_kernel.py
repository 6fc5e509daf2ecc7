"""./pib fabric up --kernel PATH [--modules DIR] [--no-driver]: the guests
boot a kernel the user built, with our userspace, the modules of theirs
that guest/modules.txt names, and our driver built against their tree (or
none, so that they load their own). examples/own-kernel.config has the
kernel configuration this needs; docs/user-guide.md the steps."""

import struct
from dataclasses import dataclass
from pathlib import Path

from pibctl import driver_build, image, paths, ui

# What a guest cannot come up without: the management network and the
# guest agent (virtio), and the InfiniBand stack rc.boot loads. The rest of
# guest/modules.txt (storage protocols, Soft-RoCE) only some tests need.
REQUIRED = ["virtio_pci", "virtio_console", "virtio_net", "ib_core", "ib_uverbs", "ib_umad",
            "ib_ipoib", "rdma_ucm"]


@dataclass(frozen=True)
class OwnKernel:
    kernel: Path  # the bzImage
    modules: Path  # INSTALL_MOD_PATH of `make modules_install`, or None
    driver: bool  # build and include our pib.ko


def release_of(bzimage: Path) -> str:
    """The release a bzImage was built as: its setup header (x86 boot
    protocol, "HdrS" at 0x202) points at the version string from 0x20e."""
    try:
        with open(bzimage, "rb") as f:
            head = f.read(0x8000)
    except OSError as e:
        raise ui.StepFailed(f"cannot read the kernel {bzimage}: {e.strerror}") from None
    if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
        raise ui.StepFailed(f"{bzimage} is not an x86 bzImage (no HdrS setup header)")
    at = struct.unpack_from("<H", head, 0x20E)[0] + 0x200
    if at >= len(head):
        raise ui.StepFailed(f"{bzimage}: the version string lies outside the setup code")
    version = head[at:at + 256].split(b"\0", 1)[0].decode("ascii", "replace").split()
    if not version:
        raise ui.StepFailed(f"{bzimage}: empty version string")
    return version[0]


def _modules_root(given: Path, release: str) -> Path:
    """The directory holding lib/modules/RELEASE: --modules names the
    INSTALL_MOD_PATH, or lib/modules/RELEASE itself."""
    given = given.resolve()
    if (given / "lib" / "modules" / release).is_dir():
        return given
    if given.name == release and given.parent.name == "modules":
        return given.parent.parent.parent
    raise ui.StepFailed(f"--modules {given}: no lib/modules/{release} in it; give the directory "
                        f"`make modules_install INSTALL_MOD_PATH=DIR` installed into")


def _driver(moddir: Path, release: str) -> Path:
    """Our pib.ko built against the tree `make modules_install` links from
    lib/modules/RELEASE/build."""
    tree = moddir / "build"
    if not (tree / "Makefile").is_file():
        raise ui.StepFailed(f"{tree} is not a kernel build tree: the driver is built against the "
                            "tree the modules came from (or use --no-driver and load your own)")
    return driver_build.build_against(tree.resolve(), release)


def initrd(own: OwnKernel, where: Path = None) -> Path:
    """Builds the initramfs for `own` in `where` (by default beside the
    bundled image); returns it."""
    release = release_of(own.kernel)
    ui.step(f"Guest image for your kernel {release} ({own.kernel})")
    for part in image.userspace_parts():
        if not part.is_file():
            raise ui.StepFailed(f"{part} is missing; run ./pib setup first")
    where = where or paths.image_dir() / "own-kernel"
    where.mkdir(parents=True, exist_ok=True)
    parts = list(image.userspace_parts())
    if own.modules is not None:
        root = _modules_root(own.modules, release)
        moddir = root / "lib" / "modules" / release
        extra = [_driver(moddir, release)] if own.driver else []
        missing = []
        parts.insert(1, image.build_modules(release, root, extra, where / "modules.cpio.zst",
                                            missing))
        required = [m for m in missing if m in REQUIRED]
        if required:
            raise ui.StepFailed(f"your kernel has neither as module nor built in: "
                                f"{', '.join(required)}; see examples/own-kernel.config")
        if missing:
            ui.warn(f"not in your kernel (tests that need them will fail): {', '.join(missing)}")
    elif own.driver:
        raise ui.StepFailed("--kernel without --modules needs --no-driver: our driver is built "
                            "against the tree your modules came from")
    out = where / "initrd.img"
    image.concatenate(parts, out)
    ui.detail(f"initramfs {out.stat().st_size / 1e6:.0f} MB at {out}")
    return out
