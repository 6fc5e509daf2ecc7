"""Simulated fabrics on the host: the generators' shapes, ibnetdiscover's
output read back, the fabric file, and the switch process simulating a
fat tree that a guest's SMPs cross. No guests needed."""

import socket
import struct
import subprocess
import time
from collections import Counter

import iba
import pytest
from pibctl import bench_scale, sim_fabric
from pibctl.fabric import control_answer
from pibctl.sim_fabric import FabricError
from test_switch_process import SWITCH, _node_info, _tmpdir


def _degrees(fab):
    """Ports cabled, per node."""
    used = Counter()
    for a, b in fab.links:
        used[a[0]] += 1
        used[b[0]] += 1
    return used


def test_a_k_ary_n_tree_has_its_shape(ctx):
    fab = sim_fabric.fat_tree(4, 3).validate()
    assert len(fab.switches) == 3 * 16 and len(fab.cas) == 64
    used = _degrees(fab)
    levels = Counter(fab.nodes[s].description.split()[1] for s in fab.switches)
    assert levels == {"L0": 16, "L1": 16, "L2": 16}
    for s in fab.switches:
        top = "L2" in fab.nodes[s].description
        assert used[s] == (4 if top else 8), fab.nodes[s]
    assert all(used[c] == 1 for c in fab.cas)
    # 10,000 nodes and more: k=20, n=3 is 1,200 switches of 40 ports and 8,000 CAs.
    big = sim_fabric.fat_tree(20, 3).validate()
    assert len(big.nodes) == 9200 and len(big.links) == 8000 + 2 * 400 * 20


def test_a_torus_and_a_dragonfly_have_their_shapes(ctx):
    t = sim_fabric.torus([4, 4, 4], hosts=2).validate()
    assert len(t.switches) == 64 and len(t.cas) == 128
    assert all(_degrees(t)[s] == 8 for s in t.switches)
    d = sim_fabric.dragonfly(a=4, p=2, h=2).validate()
    groups = 4 * 2 + 1
    assert len(d.switches) == groups * 4 and len(d.cas) == groups * 4 * 2
    # Every router's every port is cabled: CAs, its group's mesh, global links.
    assert all(_degrees(d)[s] == 2 + 3 + 2 for s in d.switches)
    # Every two groups share exactly one global link.
    group = {s: d.nodes[s].description.split()[1] for s in d.switches}
    pairs = Counter(frozenset((group[a], group[b])) for (a, _), (b, _) in d.links
                    if a in group and b in group and group[a] != group[b])
    assert len(pairs) == groups * (groups - 1) // 2 and set(pairs.values()) == {1}


def test_vls_reach_the_fabric_file_and_torus_2qos_gets_its_seeds(ctx, tmp_path):
    t = sim_fabric.parse_spec("torus:5x4x3,hosts=2,vls=8")
    text = sim_fabric.render(t, sim_fabric.place(t, 2))
    assert "\nvls 8\n" in text
    path = tmp_path / "torus.fabric"
    path.write_text(text)
    assert sim_fabric.parse_spec(str(path)).vls == 8
    assert "vls" not in sim_fabric.render(sim_fabric.parse_spec("torus:5x4x3"), [])
    # The seeds run from the origin to the next switch in x, y and z,
    # which the generator cables through ports 1, 3 and 5.
    conf = sim_fabric.torus_2qos_conf(t).splitlines()
    assert conf[0] == "torus 5 4 3"
    origin = t.nodes[0].guid
    cabled = {(t.nodes[a].guid, ap): t.nodes[b].guid for (a, ap), (b, _) in t.links}
    for line, port in zip(conf[1:], (1, 3, 5)):
        axis, a, b = line.split()
        assert int(a, 16) == origin and int(b, 16) == cabled[origin, port], line
    assert [line.split()[0] for line in conf[1:]] == ["xp_link", "yp_link", "zp_link"]
    with pytest.raises(sim_fabric.FabricError, match="tori of 2 or 3 dimensions"):
        sim_fabric.torus_2qos_conf(sim_fabric.parse_spec("fat-tree:k=2,n=2"))


def _as_ibnetdiscover(fab):
    """The fabric as ibnetdiscover prints it (rdma-core's format): every
    node with its ports, each cable at both ends."""
    ends = {}
    for a, b in fab.links:
        ends[a], ends[b] = b, a
    out = ["#", "# Topology file: generated on Tue Dec  1 05:00:00 2026", "#"]
    for i, n in enumerate(fab.nodes):
        kind, letter = ("Switch", "S") if n.switch else ("Ca", "H")
        out.append(f'{kind}\t{n.ports} "{letter}-{n.guid:016x}"\t\t# "{n.description}"'
                   + (" base port 0 lid 1 lmc 0" if n.switch else ""))
        for p in range(1, n.ports + 1):
            if (i, p) not in ends:
                continue
            j, q = ends[i, p]
            m = fab.nodes[j]
            guid = "" if n.switch else f"({n.guid + p:x})"
            rguid = "" if m.switch else f"({m.guid + q:x})"
            out.append(f'[{p}]{guid}\t"{"S" if m.switch else "H"}-{m.guid:016x}"[{q}]{rguid}'
                       f'\t\t# "{m.description}" lid 3 4xQDR')
        out.append("")
    return "\n".join(out)


def test_ibnetdiscover_output_reads_back_as_the_same_fabric(ctx, tmp_path):
    fab = sim_fabric.dragonfly(a=3, p=2, h=1)
    path = tmp_path / "fabric.ibnd"
    path.write_text(_as_ibnetdiscover(fab))
    back = sim_fabric.parse_spec(str(path))
    assert [(n.switch, n.guid, n.ports, n.description) for n in back.nodes] == \
        [(n.switch, n.guid, n.ports, n.description) for n in fab.nodes]

    def cables(f):
        return {frozenset(((f.nodes[a].guid, p), (f.nodes[b].guid, q)))
                for (a, p), (b, q) in f.links}
    assert cables(back) == cables(fab)


def test_a_fabric_file_places_guests_and_reads_back(ctx, tmp_path):
    fab = sim_fabric.fat_tree(3, 2)
    guests = sim_fabric.place(fab, 3)
    assert guests == [fab.cas[0], fab.cas[4], fab.cas[8]]  # spread over the CAs
    text = sim_fabric.render(fab, guests)
    assert text.count("\nattach ") == 3 and text.count("\nca ") == 9 - 3
    path = tmp_path / "f.fabric"
    path.write_text(text)
    back = sim_fabric.parse_spec(str(path))
    assert len(back.nodes) == len(fab.nodes) - 3 and len(back.links) == len(fab.links) - 3


@pytest.mark.parametrize("spec,why", [
    ("fat-tree:k=4", "missing n"),
    ("fat-tree:k=1,n=2", "k from 2"),
    ("torus:4x1", "every dimension from 2"),
    ("dragonfly:a=4,p=2,h=0", "a or h below 1"),
    ("fat-tree:k=4,n=3,m=2", "unknown parameter 'm'"),
    ("/nonexistent/file", "neither a generator"),
    ("torus:5x5,vls=3", "vls=3: 1, 2, 4 or 8"),
])
def test_bad_fabric_specs_are_refused(ctx, spec, why):
    with pytest.raises(FabricError, match=why):
        sim_fabric.parse_spec(spec)


def test_more_guests_than_ca_places_are_refused(ctx):
    fab = sim_fabric.SimFabric()
    fab.link(fab.add(True, 4, "s"), 1, fab.add(False, 1, "c"), 1)
    with pytest.raises(FabricError, match="2 guests and 1 CA places"):
        sim_fabric.place(fab, 2)


def test_the_switch_process_simulates_a_fat_tree_a_guest_sweeps(ctx):
    """A k-ary 3-tree with two guests' places: over port 1, directed
    routes reach the leaf, a level-2 switch and a simulated CA below
    another leaf; pulling a link is a control command."""
    d = _tmpdir("sim-fabric")
    fab = sim_fabric.fat_tree(4, 3)
    guests = sim_fabric.place(fab, 2)
    (d / "f.fabric").write_text(sim_fabric.render(fab, guests))
    proc = subprocess.Popen([str(SWITCH), "--fabric", str(d / "f.fabric"), "--socket-dir", str(d),
                             "--control", str(d / "control.sock")],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not (d / "control.sock").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        assert control_answer(d / "control.sock", "fabric").startswith(
            "ok 48 switches, 62 CAs, 2 ports")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(str(d / "port1.sock"))
        kind, hello = iba.read_frame(s)
        assert kind == iba.HELLO
        s.sendall(iba.hello(0x1111, 1))
        leaf = fab.nodes[fab.links[[i for i, (a, b) in enumerate(fab.links)
                                    if b[0] == guests[0]][0]][0][0]]
        _, mad = _node_info(s, 1)
        assert struct.unpack(">Q", mad[64 + 12:64 + 20])[0] == leaf.guid
        assert mad[64 + 2] == 2 and mad[64 + 3] == 8  # a switch of 8 ports
        _, mad = _node_info(s, 1, 5, 5)  # up, up: level 2
        guid = struct.unpack(">Q", mad[64 + 12:64 + 20])[0]
        assert "L2" in next(n.description for n in fab.nodes if n.guid == guid)
        _, mad = _node_info(s, 1, 5, 2, 2)  # up, down, down: a CA of another leaf
        assert mad[64 + 2] == 1 and mad[64 + 36] == 1  # a CA, reached at its port 1
        answer = control_answer(d / "control.sock", f"link {leaf.guid:#x} 5 down")
        assert answer.startswith("ok link"), answer
        assert "no link inside" in control_answer(d / "control.sock", f"link {leaf.guid:#x} 1 down")
        assert "link, fabric" in control_answer(d / "control.sock", "nonsense")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert "48 simulated switches, 62 simulated CAs" in err


_OPENSM_LOG = """Dec 01 05:22:14 908511 [81B176C0] 0x04 -> state_mgr_sweep_hop_0:
******************************************************************
********************* INITIATING HEAVY SWEEP *********************
******************************************************************
Dec 01 05:22:15 449808 [81B176C0] 0x04 -> do_sweep:
********************** HEAVY SWEEP COMPLETE **********************
Dec 01 05:22:15 520105 [81B176C0] 0x04 -> ucast_mgr_route: building routing with 'minhop' routing algorithm...
Dec 01 05:22:15 534794 [81B176C0] 0x02 -> osm_ucast_mgr_process: minhop tables configured on all switches
Dec 01 05:22:15 574126 [81B176C0] 0x04 -> do_sweep:
**************** SWITCHES CONFIGURED FOR UNICAST *****************
Dec 01 05:22:15 752186 [81B176C0] 0x02 -> SUBNET UP
Dec 01 05:22:24 871800 [81B176C0] 0x04 -> state_mgr_light_sweep_start:
********************* INITIATING LIGHT SWEEP *********************
Dec 01 05:22:24 896381 [81B176C0] 0x04 -> do_sweep:
********************** LIGHT SWEEP COMPLETE **********************
"""


def test_the_scale_benchmark_reads_opensms_sweep_from_its_log(ctx):
    t = bench_scale.sweep_times(_OPENSM_LOG)
    assert t == {"discovery_s": 0.541, "route_s": 0.015, "lfts_s": 0.039,
                 "subnet_up_s": 0.844, "light_sweep_s": 0.025}
    # What the guest picks of a log too large to bring whole reads the same.
    picked = subprocess.run(["sh", "-c", bench_scale._PICK], input=_OPENSM_LOG,
                            capture_output=True, text=True, check=True).stdout
    assert picked.count("\n") == 8 and bench_scale.sweep_times(picked) == t
    assert bench_scale.doc_is_current() == ""


def test_the_scale_table_says_how_each_row_was_measured_and_what_it_lacks(ctx):
    row = {"spec": "fat-tree:k=10,n=3", "nodes": 1300, "switches": 300, "engine": "updn",
           "engine_used": "updn", "discovery_s": 7.0, "route_s": 1.0, "lfts_s": 2.0,
           "subnet_up_s": 16.0, "light_sweep_s": 0.1, "after_link_down_s": 7.0, "rss_mb": 33.0,
           "bytes_per_node": 26537, "cpu_s": 2.0, "accel": "tcg", "date": "2026-12-02",
           "guests_beside": 2, "revision": "813ad5a"}
    line = bench_scale.render_row(row)
    assert line.endswith("| 2026-12-02, tcg, 813ad5a, 2 other guests running |"), line
    failed = bench_scale.render_row({"spec": "fat-tree:k=10,n=3", "engine": "ftree",
                                     "error": "timeout", "accel": "kvm", "date": "2026-12-02"})
    assert failed.count("|") == line.count("|") and failed.endswith("| 2026-12-02, kvm |")
    table = bench_scale.render({"1000 updn": row})
    assert "Not run: minhop at 1,000, ftree at 1,000," in table
    assert "dfsssp at 10,000, torus-2QoS at 10,000." in table
    everything = {f"{s} {e}": row for s in bench_scale.SIZES for e in bench_scale.ENGINES}
    assert "Not run" not in bench_scale.render(everything)
