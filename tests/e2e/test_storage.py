"""The kernel's RDMA storage protocols between guests, content-checked:
NVMe over Fabrics (an nvmet-rdma target on vm2 exporting a RAM disk,
`nvme connect -t rdma` from vm1) and NFS over RDMA (an NFSv4.2 export on
vm2 mounted on vm1 with proto=rdma). Both register every I/O buffer with
fast registration work requests and invalidate them locally or with SEND
with invalidate (docs/prm.md §6.2): they run only because the device has
the memory management extensions. Random data is written, read back over
the fabric and compared by SHA-256 at both ends."""

import re

import pytest

from pibctl import fabric
from storage import (NfsMounted, NvmeConnected, Roles, SrpDisk, disk_roundtrip,
                     nfs_roundtrip, nvme_roundtrip)

# Linux 6.1's rpcrdma (a guest kernel of ./pib test --kernel 6.1) cancels
# its MR refresh work, queued on events_highpri, from the xprtiod
# workqueue when a connection closes, which the workqueue code warns about
# (a WQ_MEM_RECLAIM worker waiting on one that is not). It is the NFS
# client's, not the HCA's, and newer kernels do not do it.
pytestmark = pytest.mark.kernel_log_expected(
    "WQ_MEM_RECLAIM xprtiod:xprt_autoclose [sunrpc] is flushing "
    "!WQ_MEM_RECLAIM events_highpri:rpcrdma_mr_refresh_worker [rpcrdma]")

NVME_MB = 32
NFS_FILES = 4
NFS_MB = 8
SRP_MB = 32
FAULTS = "loss=1% reorder=2% seed=23"
VM1_TO_VM2 = Roles()  # vm1 the initiator, vm2 the target


def test_nvme_over_rdma(ctx):
    with NvmeConnected(ctx):
        write, read = nvme_roundtrip(ctx, VM1_TO_VM2, NVME_MB)
    print(f"NVMe-oF over RDMA: {NVME_MB} MiB written at {write:.1f} MB/s, read at {read:.1f} MB/s; "
          f"SHA-256 equal on vm1 and on the target; 4 scattered 4 KiB blocks equal")


def test_nfs_over_rdma(ctx):
    with NfsMounted(ctx):
        write, read = nfs_roundtrip(ctx, VM1_TO_VM2, NFS_FILES, NFS_MB)
        stats = ctx.sh("vm1", "grep -A1 'xprt:' /proc/self/mountstats | head -2").out
        assert "rdma" in stats, stats
    print(f"NFS over RDMA: {NFS_FILES} files of {NFS_MB} MiB written at {write:.1f} MB/s, "
          f"read back at {read:.1f} MB/s (means); SHA-256 equal on vm1 and on the server")


def test_storage_over_a_cable_that_loses_and_reorders(ctx):
    """Both protocols again with vm2's cable losing and reordering packets
    (the switch's fault injection): RC resends, the data still matches."""
    switch, port = ctx.fabric.vm("vm2").cables[0]

    def counted(name):
        status = fabric.switch_control(ctx.fabric, switch, "status")
        return sum(int(n) for n in re.findall(rf"port {port} (?:in|out): .* {name}=(\d+)", status))

    with NvmeConnected(ctx), NfsMounted(ctx):
        fabric.fault(f"{switch}:{port}", FAULTS.split())  # its counters start at 0
        try:
            nvme = nvme_roundtrip(ctx, VM1_TO_VM2, 8)
            nfs = nfs_roundtrip(ctx, VM1_TO_VM2, 2, 4)
            dropped, reordered = counted("dropped"), counted("reordered")
        finally:
            fabric.fault(f"{switch}:{port}", ["clear"])
    assert dropped > 0 and reordered > 0, (dropped, reordered)
    print(f"storage under {FAULTS}: NVMe-oF 8 MiB at {nvme[0]:.1f}/{nvme[1]:.1f} MB/s, NFS 2 x 4 MiB "
          f"at {nfs[0]:.1f}/{nfs[1]:.1f} MB/s (write/read), checksums equal; the switch dropped "
          f"{dropped} and reordered {reordered} packets")


def test_srp(ctx):
    """SCSI RDMA Protocol: LIO's ib_srpt exports vm2's RAM disk, vm1's
    ib_srp logs in to it over the IB CM and sees a SCSI disk; random data
    written in 1 MiB direct I/Os (fast-registered by ib_srp), read back,
    compared on vm1 and against the target's RAM disk."""
    with SrpDisk(ctx) as disk:
        write, read = disk_roundtrip(ctx, VM1_TO_VM2, disk, SRP_MB)
    print(f"SRP: {SRP_MB} MiB written at {write:.1f} MB/s, read at {read:.1f} MB/s; "
          f"SHA-256 equal on vm1 and on the target")
