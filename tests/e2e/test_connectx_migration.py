"""Live migration of a ConnectX guest (docs/migration.md, "The ConnectX
personality"; issue 33): vm2, whose unmodified mlx5_core, mlx5_ib and
libmlx5 drive the device, moves to a new QEMU process and back in the
middle of RC traffic both ways with vm3, another ConnectX guest, vm2's
buffers registered on demand (implicitly in one direction), at RC
timeout 30 (73 minutes: what a move lost is resent as the link resumes,
and no operation may take 20 s). pib-traffic checks every byte of WRITEs,
READs, SENDs and atomics at both ends, no QP goes to error, and the
switch keeps vm2's link up (ACTIVE, the same LID); after the moves the
kernel's own consumers still work (IPoIB carries random data), and
mlx5_core's health poll found nothing (the runner scans the kernel
log)."""


import pytest

from pibctl.pairs import ipoib_up
from transfers import (UNDER_WAY, BackgroundTraffic, bulk_tcp, moves_under_traffic,
                       on_demand_regions, some_traffic_through)

pytestmark = [
    pytest.mark.topology("connectx.topo"),
    pytest.mark.errors_on_purpose("packets to vm2's switch port while it moves are discarded "
                                  "(PortXmitDiscards), as a move loses what is on the wire"),
]

# RC timeout 30, which IBA makes 73 minutes: only what the resumed link
# says makes a QP resend what a move lost (docs/migration.md); an
# operation that waits 20 s fails the test. Every operation at once (-P),
# until asked to stop after the moves.
TRAFFIC = ["-t", "write,read,send,fadd,cas", "-s", "4096,65536,1M+3", "-q", "2",
           "-n", "1000", "-P", "-T", "30", "-r", "7", "-w", "20"]
MOVES = 2  # there and back
COUNTERS = ("local_ack_timeout_err", "duplicate_request", "out_of_sequence")


def _counters(ctx, vm):
    """The retransmission counters mlx5_ib shows (from the Q counter)."""
    path = "/sys/class/infiniband/mlx5_0/ports/1/hw_counters"
    out = ctx.sh(vm, "; ".join(f"cat {path}/{name}" for name in COUNTERS)).out.split()
    return dict(zip(COUNTERS, map(int, out)))


def _lid(ctx, vm):
    return ctx.sh(vm, "cat /sys/class/infiniband/mlx5_0/ports/1/lid").out.strip()


def test_a_connectx_guest_moves_there_and_back_under_rc_traffic(ctx):
    before = {vm: _counters(ctx, vm) for vm in ("vm2", "vm3")}
    lid = _lid(ctx, "vm2")
    # Both ways: vm2 the requester of one run and the responder of the
    # other, its buffers on demand (docs/mlx5.md §10.6, §10.7): one
    # implicit region in the first, a region per buffer in the second.
    runs = [BackgroundTraffic(ctx, TRAFFIC + ["--odp", "implicit"], 18930, client_vm="vm2",
                              server_vm="vm3"),
            BackgroundTraffic(ctx, TRAFFIC, 18932, client_vm="vm3", server_vm="vm2",
                              server_args=["--odp", "explicit"])]
    for client in ('vm2', 'vm3'):  # each run under way (bounded by the 3 s it was given)
        some_traffic_through(ctx, client, 3, UNDER_WAY)
    assert all(run.running() for run in runs), "the traffic ended before the first move"
    regions = on_demand_regions(ctx, "vm2")
    assert regions["implicit"] == 1 and regions["explicit"] > 0, regions
    moves_under_traffic(ctx, runs, "vm2", MOVES, lambda vm: _counters(ctx, vm), before)
    assert _lid(ctx, "vm2") == lid, "the moved port's LID changed"
    # The kernel's consumers on the moved device: IPoIB both ways.
    ipoib_up(ctx, ("vm2", "vm3"))
    rates = [bulk_tcp(ctx, 4, 18931, source_vm=a, sink_vm=b)
             for a, b in (("vm2", "vm3"), ("vm3", "vm2"))]
    print(f"after the moves, IPoIB carried 4 MiB of random data each way between vm2 and vm3 "
          f"({rates[0]:.1f} and {rates[1]:.1f} MB/s), SHA-256 equal")
