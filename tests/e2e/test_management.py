"""Subnet management through the fabric: what opensm configured, as
infiniband-diags see it (IBA chapters 14 and 16)."""

import re

import pytest

# test_management also runs on the fabric of tests/e2e/two-switches.topo.
pytestmark = pytest.mark.also_two_switches


def _lid(ctx, vm):
    return int(ctx.run(vm, ["cat", "/sys/class/infiniband/pib_0/ports/1/lid"]).out, 16)


def _switch_lid(ctx):
    """The LID of the switch vm1 is cabled to."""
    out = ctx.run("vm1", ["smpquery", "-D", "portinfo", "0,1", "0"]).out
    return int(re.search(r"^Lid:\.+(\d+)", out, re.M).group(1))


def _cabled_ports(out, kind, guid):
    """What ibnetdiscover says one node's ports are cabled to:
    {port: ("S" or "H", remote node GUID, remote port)}."""
    letter = "S" if kind == "Switch" else "H"
    for block in out.split("\n\n"):
        if re.search(rf'^{kind}\s+\d+ "{letter}-0*{guid:x}"', block, re.M):
            return {int(m[1]): (m[2], int(m[3], 16), int(m[4])) for m in re.finditer(
                r'^\[(\d+)\](?:\([0-9a-f]+\))?\s+"([SH])-([0-9a-f]+)"\[(\d+)\]', block, re.M)}
    raise AssertionError(f"no {kind} {guid:x} in:\n{out}")


def test_ibnetdiscover_sees_the_real_topology(ctx):
    out = ctx.run("vm2", ["ibnetdiscover"]).out
    topo = ctx.fabric.topo
    guid = {s.name: s.guid for s in topo.switches}
    expected = {s.name: {} for s in topo.switches}
    for s in topo.switches:
        assert re.search(rf'^Switch\s+{s.ports} "S-0*{s.guid:x}"\s+# "{s.name}"', out, re.M), out
        for port, other, other_port in topo.neighbours(s.name):
            expected[s.name][port] = ("S", guid[other], other_port)
    for vm in ctx.fabric.vms:
        assert re.search(rf'^Ca\s+{len(vm.cables)} "H-0*{vm.node_guid:x}"\s+# "{vm.name} pib_hca"',
                         out, re.M), out
        ca = {}
        for n, (switch, port) in enumerate(vm.cables, 1):
            expected[switch][port] = ("H", vm.node_guid, n)
            ca[n] = ("S", guid[switch], port)
        assert _cabled_ports(out, "Ca", vm.node_guid) == ca, out
    # Every switch port exactly as cabled: nothing missing, nothing extra.
    for s in topo.switches:
        assert _cabled_ports(out, "Switch", s.guid) == expected[s.name], out
    assert len(re.findall(r"^Ca\s", out, re.M)) == len(ctx.vms), out
    assert len(re.findall(r"^Switch\s", out, re.M)) == len(topo.switches), out


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
        # VMs on vm1's switch by their port; the others along a shortest path.
        home = ctx.fabric.vms[0].switch
        ports = {vm.switch_port} if vm.switch == home else ctx.fabric.topo.first_hops(home, vm.switch)
        route = re.search(rf"^0x{lid:04x} (\d+) ", out, re.M)
        assert route and int(route.group(1)) in ports, (ports, out)


def test_sminfo_and_saquery(ctx):
    out = ctx.run("vm2", ["sminfo"]).out
    guid = int(re.search(r"sm guid (0x[0-9a-f]+)", out).group(1), 16)
    assert guid == ctx.fabric.vms[0].node_guid + 1 and "SMINFO_MASTER" in out, out
    out = ctx.run("vm2", ["saquery", "NodeRecord"], timeout=60).out
    ports = sum(len(vm.cables) for vm in ctx.fabric.vms)
    assert out.count("NodeRecord dump") == ports + len(ctx.fabric.topo.switches), out


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
