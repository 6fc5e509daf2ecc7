"""The ConnectX personality (docs/mlx5.md) with the guest kernel's own,
unmodified mlx5_core and mlx5_ib: on a fabric of its own
(tests/e2e/connectx.topo), vm2's HCA is a ConnectX-5 and vm1's a pib-hca
running opensm. The SM finds and configures the ConnectX like any CA, and
kernel consumers on the two guests talk: IPoIB, in datagram mode (UD
QPs) and in connected mode (RC QPs on SRQs, connected by the CM), carries
random data both ways, every byte compared. User space (libmlx5) is
issue 31's."""

import re

from pibctl.pairs import ipoib_up
from transfers import bulk_tcp

ONLY_ON_TOPOLOGY = "connectx.topo"

CX = "vm2"
DEVICE = "/sys/class/infiniband/mlx5_0"
NODE_DESC = "vm2 ConnectX personality"
CM_SUPPORTED = 1 << 16  # PortInfo CapabilityMask: IsCommunicationManagementSupported
PAYLOAD_MIB = 8
PORT = 18590


def _lid(ctx, vm, device):
    return int(ctx.run(vm, ["cat", f"/sys/class/infiniband/{device}/ports/1/lid"]).out, 16)


def test_mlx5_core_and_mlx5_ib_drive_the_connectx(ctx):
    ids = ctx.sh(CX, "lspci -n -d 15b3:1017").out
    assert "15b3:1017" in ids, ids
    driver = ctx.sh(CX, "for d in /sys/bus/pci/devices/*; do "
                        "[ $(cat $d/vendor):$(cat $d/device) = 0x15b3:0x1017 ] && "
                        "basename $(readlink $d/driver); done; true").out
    assert driver.split() == ["mlx5_core"], driver
    state = ctx.run(CX, ["cat", f"{DEVICE}/ports/1/state"]).out.strip()
    assert state == "4: ACTIVE", state
    board = ctx.run(CX, ["cat", f"{DEVICE}/board_id"]).out.strip()
    assert board == "PIB0000000001", board
    print(f"{CX}: 15b3:1017 bound by mlx5_core, mlx5_0 port 1 {state}, board_id {board}")


def test_the_sm_sees_a_connectx_with_its_node_description(ctx):
    ctx.sh(CX, f"printf '%s' '{NODE_DESC}' > {DEVICE}/node_desc")
    lid = _lid(ctx, CX, "mlx5_0")
    info = ctx.run("vm1", ["smpquery", "nodeinfo", str(lid)]).out
    vendor = re.search(r"VendorId:\.+0x([0-9a-f]+)", info)
    device = re.search(r"DevId:\.+0x([0-9a-f]+)", info)
    assert vendor and int(vendor.group(1), 16) == 0x02c9, info
    assert device and int(device.group(1), 16) == 0x1017, info
    desc = ctx.run("vm1", ["smpquery", "nodedesc", str(lid)]).out
    assert NODE_DESC in desc, desc
    port = ctx.run("vm1", ["smpquery", "portinfo", str(lid), "1"]).out
    mask = re.search(r"CapMask:\.+0x([0-9a-f]+)", port)
    assert mask and int(mask.group(1), 16) & CM_SUPPORTED, port
    print(f"from vm1: LID {lid} is VendorID 0x02c9 DevID 0x1017 '{NODE_DESC}', "
          f"CapMask 0x{int(mask.group(1), 16):x} (the CM's bit set through PCAP)")


def _counter(ctx, lid, name):
    out = ctx.run("vm1", ["perfquery", "-x", str(lid), "1"]).out
    found = re.search(rf"^{name}:\.+(\d+)", out, re.M)
    assert found, out
    return int(found.group(1))


def _both_ways(ctx, mode, mtu):
    """IPoIB in `mode` on both guests: pings, then PAYLOAD_MIB of random
    bytes each way over TCP, SHA-256 compared at both ends; the
    ConnectX's PortXmitData (4-byte words) must have grown by at least
    what it sent."""
    ipoib_up(ctx)
    for vm in ("vm1", "vm2"):
        ctx.sh(vm, f"echo {mode} > /sys/class/net/ib0/mode && ip link set ib0 mtu {mtu}")
    for src, dst in (("vm1", "vm2-ib"), ("vm2", "vm1-ib")):
        ping = ctx.run(src, ["ping", "-c", "3", "-i", "0.2", "-W", "5", dst], check=False)
        assert ping.exitcode == 0 and " 0% packet loss" in ping.out, ping.out + ping.err
    lid = _lid(ctx, CX, "mlx5_0")
    sent_before = _counter(ctx, lid, "PortXmitData")
    rates = [bulk_tcp(ctx, PAYLOAD_MIB, PORT, source_vm=src, sink_vm=dst)
             for src, dst in (("vm1", "vm2"), ("vm2", "vm1"))]
    words = _counter(ctx, lid, "PortXmitData") - sent_before
    assert words * 4 >= PAYLOAD_MIB << 20, words
    print(f"IPoIB {mode} (MTU {mtu}): {PAYLOAD_MIB} MiB vm1 -> vm2 at {rates[0]:.1f} MB/s, "
          f"vm2 -> vm1 at {rates[1]:.1f} MB/s, SHA-256 equal; the ConnectX sent "
          f"{words * 4 >> 20} MiB (PortXmitData)")


def test_ipoib_datagram_mode_carries_random_data_both_ways(ctx):
    _both_ways(ctx, "datagram", 2044)


def test_ipoib_connected_mode_carries_random_data_both_ways(ctx):
    # RC QPs on an SRQ at both ends, connected by the CM through QP1.
    try:
        _both_ways(ctx, "connected", 65520)
    finally:
        for vm in ("vm1", "vm2"):
            ctx.sh(vm, "echo datagram > /sys/class/net/ib0/mode && ip link set ib0 mtu 2044",
                   check=False)

