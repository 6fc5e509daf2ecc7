"""A two-port HCA: vm3's port 1 is cabled to switch1 and its port 2 to
switch2 (tests/e2e/hostile.topo). pib-traffic runs over each port in
turn to a guest on the other side, then over both at once; every byte is
checked at both ends."""

import pytest

from transfers import BackgroundTraffic, same_at_both_ends, traffic

pytestmark = pytest.mark.topology("hostile.topo")

ARGS = ["-q", "2", "-s", "0,4097,65536,1M+3", "-n", "2"]
PEERS = ((1, "vm1"), (2, "vm2"))  # vm3's port, and the guest it sends to


def test_traffic_over_each_port_of_a_two_port_hca(ctx):
    for ib_port, peer in PEERS:
        print(f"vm3 port {ib_port} -> {peer}:")
        traffic(ctx, [*ARGS, "-i", str(ib_port)], port=18850 + ib_port, client_vm="vm3",
                server_vm=peer)


def test_traffic_over_both_ports_at_once(ctx):
    runs = [BackgroundTraffic(ctx, [*ARGS, "-i", str(ib_port)], 18860 + ib_port,
                              client_vm="vm3", server_vm=peer) for ib_port, peer in PEERS]
    for (ib_port, peer), run in zip(PEERS, runs):
        rc, out, src, sout = run.wait()
        assert rc == 0 and src == 0, f"port {ib_port}: client {rc}, server {src}\n{out}\n{sout}"
        lines = same_at_both_ends(out, sout)
        print(f"vm3 port {ib_port} -> {peer} at the same time: "
              f"{sum(int(line['bytes']) for line in lines.values())} bytes, SHA-256 equal")
