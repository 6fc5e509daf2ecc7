"""A host directory in every guest, at the same path (./pib fabric up
--share DIR, ./pib run --share DIR, a topology file's `share DIR`).

Through QEMU's virtio-9p: the server is in QEMU itself, so there is no
daemon to start, and guest RAM stays what it is (virtiofs would need
virtiofsd beside each QEMU and guest RAM in a shared-memory backend,
which would change every guest's memory and every snapshot of it). Its
cost: metadata is slower, and QEMU refuses to migrate or save a guest
while the share is mounted in it.

Every guest's machine has an empty PCIe root port for the share
(QEMU_PORT, in the command line a snapshot is keyed on), so that the
same steps serve a fabric booted and one restored from its snapshot:
each QEMU starts with the directory as an -fsdev backend (which holds
no guest state, so a snapshot taken without it restores with it), and
once the fabric is up the virtio-9p device is hot-added to that port and
the guest mounts it."""

import os
import shlex
import time

from pibctl import fabric, qmp, ui

FSDEV_ID = "pibshare"
MOUNT_TAG = "pibshare"
QEMU_PORT = "share-rp"
# The guest's mount: 9P2000.L, which carries Linux's file semantics; no
# cache but what a writable shared mapping needs (cache=mmap), so that
# what one guest or the host writes, every guest reads at once; 256 KiB
# messages (virtio's transport takes up to 512 KiB).
MOUNT_OPTIONS = "trans=virtio,version=9p2000.L,cache=mmap,msize=262144"
ATTACH_TIMEOUT_S = 60

# Where a share would hide what the guest's own system needs.
_GUEST_SYSTEM = ("/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/root",
                 "/run", "/sbin", "/sys", "/tmp", "/usr", "/var")


def checked_dir(path: str) -> str:
    """`path` as the share's absolute path, or StepFailed saying why not."""
    full = os.path.realpath(path)
    if not os.path.isdir(full):
        raise ui.StepFailed(f"--share {path}: not a directory")
    if full in _GUEST_SYSTEM or full.startswith(("/proc/", "/sys/", "/dev/")):
        raise ui.StepFailed(f"--share {path}: the guests' own {full} would be hidden; "
                            "share a directory of yours")
    return full


def qemu_port_args() -> list:
    """The empty root port every guest's machine has for the share."""
    return ["-device", f"pcie-root-port,id={QEMU_PORT},chassis=2,slot=2"]


def qemu_backend_args(directory: str) -> list:
    """What each QEMU starts with when the fabric shares `directory`.
    security_model=none: files keep the owner the guest gives them where
    the host allows it, and a QEMU run by a user other than root still
    serves the share (what it cannot chown, it leaves)."""
    if not directory:
        return []
    path = directory.replace(",", ",,")  # QEMU's option syntax
    return ["-fsdev", f"local,id={FSDEV_ID},path={path},security_model=none,multidevs=remap"]


def refuse_while_shared(fab: fabric.Fabric, what: str) -> None:
    """QEMU cannot save a guest whose 9p share is mounted: say so first."""
    if fab.share_mounted:
        raise ui.StepFailed(f"{what}: the fabric shares {fab.share} with its guests, and QEMU "
                            "cannot save a guest while a virtio-9p share is mounted in it; "
                            "bring the fabric up without --share")


def attach(fab: fabric.Fabric, vms=None) -> float:
    """Hot-adds the share's device to each guest of `vms` (all by
    default) and mounts it at fab.share; returns the seconds it took."""
    start = time.monotonic()
    vms = vms or fab.vms
    ui.detail(f"sharing {fab.share} with {', '.join(vm.name for vm in vms)} (virtio-9p)")
    for vm in vms:
        # The guest has no udev to load the transport's module when the
        # device appears; load it first, and the device binds at once.
        fabric.sh_in(vm.name, "modprobe -a 9pnet_virtio 9p", timeout=30)
        try:
            qmp.command(vm.path / "qmp.sock", "device_add", driver="virtio-9p-pci",
                        id=FSDEV_ID, fsdev=FSDEV_ID, mount_tag=MOUNT_TAG, bus=QEMU_PORT)
        except qmp.QmpError as e:
            raise ui.StepFailed(f"{vm.name}: QEMU did not add the share's device: {e}") from e
    fab.share_mounted = True  # from the first device added: QEMU refuses to save it
    fab.save()
    for vm in vms:
        fabric.sh_in(vm.name, _mount_script(fab.share), timeout=ATTACH_TIMEOUT_S + 10)
    return time.monotonic() - start


def _mount_script(directory: str) -> str:
    quoted = shlex.quote(directory)
    return (
        f"for i in $(seq {ATTACH_TIMEOUT_S * 10}); do "
        f"grep -qsx {MOUNT_TAG} /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag && break; "
        "sleep 0.1; done; "
        f"grep -qsx {MOUNT_TAG} /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag || "
        f"{{ echo 'the share device did not appear in {ATTACH_TIMEOUT_S} s'; exit 1; }}; "
        f"mkdir -p {quoted} && mount -t 9p -o {MOUNT_OPTIONS} {MOUNT_TAG} {quoted}"
    )


