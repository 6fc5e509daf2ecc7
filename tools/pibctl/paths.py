"""Where things live: the checkout, the cache and the fabric run directory."""

import contextlib
import fcntl
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# What the guests' checking programs (pib-traffic, pib-mpi-check) share.
GUEST_COMMON = REPO / "guest" / "common"


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


@contextlib.contextmanager
def cache_lock(name: str):
    """Holds the cache's lock `name` (an flock, let go if the holder dies):
    for a build directory every checkout shares, which two ./pib runs (or
    two lanes of ./pib test) may otherwise build in at once."""
    locks = cache_dir() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / name, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def logs_dir() -> Path:
    return cache_dir() / "logs"


def own_qemu_choice() -> Path:
    """Names the user's QEMU tree while ./pib setup --qemu-src chose one."""
    return cache_dir() / "qemu-own" / "source"


def qemu_binary() -> Path:
    """The QEMU the guests run: the user's tree's build, or the pinned
    QEMU built with this checkout's device, which its source tree keeps
    (source_tree.py): the one QEMU build directory serves every checkout,
    and another checkout's device never runs in place of this one's."""
    if own_qemu_choice().is_file():
        return cache_dir() / "qemu-own" / "build" / "qemu-system-x86_64"
    from pibctl import source_tree
    return source_tree.tree_dir() / "qemu-system-x86_64"


def image_dir() -> Path:
    return cache_dir() / "image"


def kernel_image() -> Path:
    return image_dir() / "vmlinuz"


def initrd_image() -> Path:
    return image_dir() / "initrd.img"


def core_build_dir() -> Path:
    from pibctl import source_tree  # it needs this module's REPO and cache_dir
    return source_tree.build_dir("pib")


def fabric_switch_binary() -> Path:
    return core_build_dir() / "fabric-switch" / "pib-fabric-switch"


# Where Debian's seabios and qemu-system-data put QEMU's firmware.
QEMU_FIRMWARE_ARGS = ["-L", "/usr/share/seabios", "-L", "/usr/share/qemu"]


def mpi_sdk_dir() -> Path:
    """The image's MPIs' headers and libraries, to build guest programs."""
    return image_dir() / "mpi-sdk"
