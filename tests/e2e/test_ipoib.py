"""IPoIB between guests: ib_ipoib on pib-hca, brought up at boot
(vmN-ib is 10.78.0.N). opensm creates the broadcast group, both guests
join it (the device's multicast attach, the switches' multicast
forwarding tables), then ping up to 64 KiB and a bulk TCP transfer whose
SHA-256 is compared on both ends, in datagram and in connected mode."""

import re
import time

import pytest

from pibctl.pairs import ipoib_up
from transfers import bulk_tcp

pytestmark = pytest.mark.also_two_switches  # the broadcast group then spans two switches

BROADCAST_MGID = "ff12:401b:ffff:0:0:0:ffff:ffff"  # IPoIB's, default P_Key
BULK_MB = 16
PORT = 18560


def _mode(ctx, mode):
    """Both guests' ib0 in `mode`, with the largest MTU it allows."""
    mtu = 65520 if mode == "connected" else 2044
    ipoib_up(ctx)  # earlier tests may have reloaded the driver
    for vm in ("vm1", "vm2"):
        ctx.sh(vm, f"echo {mode} > /sys/class/net/ib0/mode && ip link set ib0 mtu {mtu}")


def _ping(ctx, size=56, count=3, deadline_s=60):
    """vm1 pings vm2-ib until a ping answers (bounded: the join and ARP may
    still be under way), then `count` pings of `size` bytes must all
    answer. Returns the average round trip in ms."""
    deadline = time.monotonic() + deadline_s
    while ctx.run("vm1", ["ping", "-c", "1", "-W", "2", "vm2-ib"], check=False).exitcode != 0:
        assert time.monotonic() < deadline, (
            "vm2-ib never answered a ping\n"
            + ctx.sh("vm1", "ip addr show ib0; cat /sys/kernel/debug/ipoib/ib0_mcg; "
                            "dmesg | tail -20", check=False).out)
    out = ctx.run("vm1", ["ping", "-c", str(count), "-i", "0.2", "-s", str(size), "-W", "5",
                          "vm2-ib"],
                  check=False).out
    m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
    assert m and m.group(1) == m.group(2) == str(count), out
    return float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))


def test_ipoib_broadcast_group_joined(ctx):
    _mode(ctx, "datagram")
    _ping(ctx)
    for vm in ("vm1", "vm2"):
        mcg = ctx.run(vm, ["cat", "/sys/kernel/debug/ipoib/ib0_mcg"]).out
        entry = mcg.split(f"GID: {BROADCAST_MGID}")
        assert len(entry) == 2 and re.search(r"complete:\s+yes", entry[1].split("GID:")[0]), mcg
    # Every switch forwards the group's MLID to two ports at least: the
    # guests' on one switch, a guest's and the link between two switches.
    records = ctx.run("vm1", ["saquery", "-m"]).out
    m = re.search(r"MGID\.+ff12:401b:ffff::ffff:ffff\s+Mlid\.+(0x[0-9A-Fa-f]+)", records)
    assert m, records
    mlid = int(m.group(1), 16)
    switches = re.findall(r"lid (\d+)", ctx.run("vm1", ["ibswitches"]).out)
    assert switches
    for lid in switches:
        table = ctx.run("vm1", ["ibroute", "-M", lid]).out
        row = [line for line in table.splitlines() if line.startswith(f"0x{mlid:04x}")]
        assert row and row[0].count("x") - 1 >= 2, table  # "0x" is not a port
        print(f"switch lid {lid}: MLID 0x{mlid:04x} ->{row[0][6:].rstrip()}")


def test_ipoib_connected_mode(ctx):
    _mode(ctx, "connected")
    try:
        rtt = _ping(ctx)
        rtt64k = _ping(ctx, size=65507, count=2)
        mbps = bulk_tcp(ctx, BULK_MB, PORT)
        print(f"IPoIB connected mode (MTU 65520): ping {rtt:.2f} ms, 64 KiB ping "
              f"{rtt64k:.2f} ms, TCP {BULK_MB} MiB {mbps:.1f} MB/s, SHA-256 equal")
    finally:
        _mode(ctx, "datagram")


def test_ipoib_datagram_mode(ctx):
    _mode(ctx, "datagram")
    rtt = _ping(ctx)
    rtt64k = _ping(ctx, size=65507, count=2)
    mbps = bulk_tcp(ctx, BULK_MB, PORT)
    print(f"IPoIB datagram mode (MTU 2044): ping {rtt:.2f} ms, 64 KiB ping {rtt64k:.2f} ms, "
          f"TCP {BULK_MB} MiB {mbps:.1f} MB/s, SHA-256 equal")
