"""Subnet management through the fabric: what opensm configured, as
infiniband-diags see it (IBA chapters 14 and 16)."""

import re
import time

# test_management also runs on a fabric of two chained switches.
ALSO_WITH_SWITCHES = 2


def _lid(ctx, vm):
    return int(ctx.run(vm, ["cat", "/sys/class/infiniband/pib_0/ports/1/lid"]).out, 16)


def _switch_lid(ctx):
    """The LID of the switch vm1 is cabled to."""
    out = ctx.run("vm1", ["smpquery", "-D", "portinfo", "0,1", "0"]).out
    return int(re.search(r"^Lid:\.+(\d+)", out, re.M).group(1))


def test_ibnetdiscover_sees_the_real_topology(ctx):
    out = ctx.run("vm2", ["ibnetdiscover"]).out
    ports = ctx.fabric.ib_switch_ports
    for k in range(1, ctx.fabric.ib_switches + 1):
        guid = f"{ctx.fabric.switch_guid(k):x}"
        assert re.search(rf'^Switch\s+{ports} "S-0*{guid}"\s+# "switch{k}"', out, re.M), out
    for vm in ctx.fabric.vms:
        guid = f"{vm.node_guid:x}"
        # Each VM's port 1 is where the launcher cabled it.
        assert re.search(rf'^\[{vm.switch_port}\]\s+"H-0*{guid}"\[1\]', out, re.M), out
        assert re.search(rf'^Ca\s+1 "H-0*{guid}"\s+# "{vm.name} pib_hca"', out, re.M), out
    assert len(re.findall(r"^Ca\s", out, re.M)) == len(ctx.vms), out
    assert len(re.findall(r"^Switch\s", out, re.M)) == ctx.fabric.ib_switches, out


def test_smpquery_by_lid(ctx):
    lid2 = _lid(ctx, "vm2")
    out = ctx.run("vm1", ["smpquery", "nodeinfo", str(lid2)]).out
    assert re.search(r"NodeType:\.+Channel Adapter", out), out
    assert f"0x{ctx.fabric.vms[1].node_guid:016x}" in out, out
    out = ctx.run("vm1", ["smpquery", "portinfo", str(lid2), "1"]).out
    assert re.search(r"LinkState:\.+Active", out), out
    assert re.search(rf"^Lid:\.+{lid2}$", out, re.M), out
    out = ctx.run("vm1", ["smpquery", "switchinfo", str(_switch_lid(ctx))]).out
    assert re.search(r"LinearFdbCap:\.+49152", out), out
    out = ctx.run("vm1", ["smpquery", "nodedesc", str(lid2)]).out
    assert "vm2 pib_hca" in out, out


def test_ibroute_shows_the_lft_opensm_wrote(ctx):
    out = ctx.run("vm1", ["ibroute", str(_switch_lid(ctx))]).out
    for vm in ctx.fabric.vms:
        lid = _lid(ctx, vm.name)
        # VMs on vm1's switch by their port; the others through the chain.
        port = vm.switch_port if vm.switch == 1 else ctx.fabric.ib_switch_ports - 1
        assert re.search(rf"^0x{lid:04x} {port:03d} ", out, re.M), out


def test_sminfo_and_saquery(ctx):
    out = ctx.run("vm2", ["sminfo"]).out
    guid = int(re.search(r"sm guid (0x[0-9a-f]+)", out).group(1), 16)
    assert guid == ctx.fabric.vms[0].node_guid + 1 and "SMINFO_MASTER" in out, out
    out = ctx.run("vm2", ["saquery", "NodeRecord"], timeout=60).out
    assert out.count("NodeRecord dump") == len(ctx.vms) + ctx.fabric.ib_switches, out


def test_perfquery_counters_rise_with_traffic(ctx):
    lid2 = _lid(ctx, "vm2")

    def xmit_pkts():
        out = ctx.run("vm1", ["perfquery", "-x", str(lid2), "1"]).out
        return int(re.search(r"^PortXmitPkts:\.+(\d+)", out, re.M).group(1))

    before = xmit_pkts()
    ctx.run("vm1", ["smpquery", "nodeinfo", str(lid2)])  # vm2 answers: it transmits
    ctx.run("vm1", ["smpquery", "nodeinfo", str(lid2)])
    assert xmit_pkts() >= before + 2


def test_ibping_between_vms(ctx):
    ctx.sh("vm2", "(timeout 60 ibping -S </dev/null >/dev/null 2>&1 &) ; sleep 1")
    try:
        out = ctx.run("vm1", ["ibping", "-c", "3", str(_lid(ctx, "vm2"))], timeout=60).out
        assert re.search(r"3 packets transmitted, 3 received", out), out
    finally:
        ctx.sh("vm2", "kill $(pidof ibping) 2>/dev/null; true")
