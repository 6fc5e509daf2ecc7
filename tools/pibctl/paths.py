"""Where things live: the checkout, the cache and the fabric run directory."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Downloads and builds, outside the clone ($PIB_CACHE)."""
    env = os.environ.get("PIB_CACHE")
    if env:
        return Path(env).resolve()
    return Path.home() / ".cache" / "pib-hca"


def run_dir() -> Path:
    """State of the running fabric: sockets, pids, logs ($PIB_RUN_DIR)."""
    env = os.environ.get("PIB_RUN_DIR")
    if env:
        return Path(env).resolve()
    return cache_dir() / "run"


def logs_dir() -> Path:
    return cache_dir() / "logs"


def own_qemu_choice() -> Path:
    """Names the user's QEMU tree while ./pib setup --qemu-src chose one."""
    return cache_dir() / "qemu-own" / "source"


def qemu_binary() -> Path:
    """The QEMU the guests run: the pinned build, or the user's tree's."""
    which = "qemu-own" if own_qemu_choice().is_file() else "qemu"
    return cache_dir() / which / "build" / "qemu-system-x86_64"


def image_dir() -> Path:
    return cache_dir() / "image"


def kernel_image() -> Path:
    return image_dir() / "vmlinuz"


def initrd_image() -> Path:
    return image_dir() / "initrd.img"


def core_build_dir() -> Path:
    return cache_dir() / "build" / "pib"


def fabric_switch_binary() -> Path:
    return core_build_dir() / "fabric-switch" / "pib-fabric-switch"


# Where Debian's seabios and qemu-system-data put QEMU's firmware.
QEMU_FIRMWARE_ARGS = ["-L", "/usr/share/seabios", "-L", "/usr/share/qemu"]
