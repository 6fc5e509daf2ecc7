"""Topology files and the chain ./pib fabric up builds from --switches:
host-only checks of what the launcher would start, no guests needed."""

from pathlib import Path

from pibctl import fabric, topology
from pibctl.topology import TopologyError

REPO = Path(__file__).resolve().parents[2]


def _error(text):
    try:
        topology.parse(text, "t.topo")
    except TopologyError as e:
        return str(e)
    raise AssertionError(f"accepted:\n{text}")


def test_a_chain_of_switches_from_the_command_line(ctx):
    topo = topology.chain(vms=4, switches=2)
    assert [s.name for s in topo.switches] == ["switch1", "switch2"]
    assert [(lk.a, lk.a_port, lk.b, lk.b_port) for lk in topo.links] == [
        ("switch2", 8, "switch1", 7)]
    assert [g.cables for g in topo.guests] == [
        [("switch1", 1)], [("switch2", 1)], [("switch1", 2)], [("switch2", 2)]]
    # Enough ports for the VMs plus the chain's two.
    assert topology.chain(vms=20, switches=2).switches[0].ports == 12


def test_every_shipped_topology_file_is_valid(ctx):
    files = sorted((REPO / "examples").glob("*.topo")) + [REPO / "tests/e2e/two-switches.topo"]
    assert len(files) >= 4
    for path in files:
        topo = topology.parse(path.read_text(), str(path))
        assert topo.guests[0].name == "vm1"
    ring = topology.parse((REPO / "examples/ring.topo").read_text())
    assert ring.guests[0].cables == [("a", 1), ("b", 2)]
    # Around a ring of three, the shortest way is the direct cable.
    assert ring.first_hops("a", "b") == {8}
    assert ring.first_hops("a", "c") == {7}
    tree = topology.parse((REPO / "examples/fat-tree.topo").read_text())
    assert tree.first_hops("leaf1", "leaf2") == {7, 8}  # either spine


def test_bad_topologies_are_refused_with_the_line(ctx):
    sw = "switch s ports=4\n"
    assert "t.topo:2: unknown statement 'wire'" in _error(sw + "wire s:1 s:2\n")
    assert "expected SWITCH:PORT" in _error(sw + "vm vm1 s\n")
    assert "s has ports 1..4, not 5" in _error(sw + "vm vm1 s:5\n")
    assert "s:1 is already cabled to vm1 port 1" in _error(sw + "vm vm1 s:1\nvm vm2 s:1\n")
    assert "no switch named x" in _error(sw + "vm vm1 x:1\n")
    assert "vm1..vmN" in _error(sw + "vm vm2 s:1\n")
    assert "named vm1, vm2" in _error(sw + "vm db1 s:1\n")
    assert "1 or 2 switch ports" in _error(sw + "vm vm1 s:1 s:2 s:3\n")
    assert "not connected to vm1's switch" in _error(sw + "switch t\nvm vm1 s:1\n")
    assert "used twice" in _error(sw + "switch s\nvm vm1 s:1\n")
    assert "HOST:PORT" in _error(sw + "tcp-listen s:2 nowhere\nvm vm1 s:1\n")
    assert "bad value" in _error("switch s ports=many\n")
    # A TCP link may join islands through another host: no connectivity check.
    topology.parse(sw + "switch t\ntcp-connect t:1 10.0.0.1:7001\nvm vm1 s:1\n")


def test_the_switches_are_started_as_the_topology_says(ctx):
    topo = topology.parse((REPO / "examples/two-hosts.topo").read_text())
    fab = fabric.Fabric(run_dir="/r", accel="tcg", topology=topo.to_dict())
    cmd = fabric._switch_command(fab, fab.topo, fab.topo.switches[0])
    assert cmd[cmd.index("--tcp") + 1] == "8=0.0.0.0:7001"
    ring = topology.parse((REPO / "examples/ring.topo").read_text())
    fab = fabric.Fabric(run_dir="/r", accel="tcg", topology=ring.to_dict())
    # The second-named switch of each link dials the first one's socket.
    c = fabric._switch_command(fab, fab.topo, fab.topo.switch("c"))
    assert c[c.index("--connect") + 1] == "7=/r/b/port8.sock"
    a = fabric._switch_command(fab, fab.topo, fab.topo.switch("a"))
    assert a[a.index("--connect") + 1] == "7=/r/c/port8.sock"


def test_fabric_up_refuses_a_bad_topology_file(ctx):
    r = ctx.pib("fabric", "up", "--topology", "/nonexistent.topo")
    assert r.returncode != 0 and "cannot read /nonexistent.topo" in r.stdout + r.stderr
    r = ctx.pib("fabric", "up", "--topology", str(REPO / "examples/ring.topo"), "--vms", "3")
    assert r.returncode != 0 and "drop --vms and --switches" in r.stdout + r.stderr


def test_a_fault_on_a_cable_inside_a_simulated_fabric_starts_with_its_switch(ctx, tmp_path):
    text = ("simulated fabric fat-tree:k=2,n=2 places=2\nvm vm1 fabric:1\nvm vm2 fabric:2\n"
            "fault fabric:0x0250494253500005:3 loss=1% dir=in\n")
    topo = topology.parse(text)
    assert topo.switch("fabric").link_faults == {"0x250494253500005:3": "loss=1% dir=in"}
    fab = fabric.Fabric(run_dir=str(tmp_path), accel="tcg", topology=topo.to_dict())
    cmd = fabric._switch_command(fab, fab.topo, fab.topo.switch("fabric"))
    assert cmd[cmd.index("--fault") + 1] == "0x250494253500005:3=loss=1%,dir=in"
    assert "not a simulated fabric" in _error("switch s\nfault s:0x5:3 loss=1%\nvm vm1 s:1\n")
    assert "expected NAME:GUID:PORT" in _error(text + "fault fabric:0xzz:3 loss=1%\n")
    assert "expected NAME:GUID:PORT" in _error(text + "fault fabric:0x5:255 loss=1%\n")
