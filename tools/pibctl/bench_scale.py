"""./pib bench --scale: opensm in a guest against simulated fabrics of
1,000 to 10,000 nodes (sim_fabric.py), per routing engine: how long its
first heavy sweep's discovery takes, the routing engine's computation and
the LFTs' distribution, the time to every port ACTIVE (SUBNET UP), a light
sweep, and the heavy sweep after a link is pulled (Trap 128); and what the
switch process spends per simulated node. Results go to
docs/scale-results.json, and the table in docs/scale.md is written from it
(./pib test checks that it is)."""

import json
import re
import time
from datetime import date, datetime
from pathlib import Path

from pibctl import bench_summary, fabric, paths, sim_fabric, topology, ui

RESULTS = paths.REPO / "docs" / "scale-results.json"
DOC = paths.REPO / "docs" / "scale.md"
TABLE_START = "<!-- scale table: written by ./pib bench --scale from docs/scale-results.json -->"
TABLE_END = "<!-- end of the scale table -->"

# Fat trees of about 1,000, 5,000 and 10,000 nodes: k-ary 3-trees.
SIZES = {1000: "fat-tree:k=10,n=3", 5000: "fat-tree:k=16,n=3", 10000: "fat-tree:k=21,n=3"}
# torus-2QoS routes 3-D tori, and needs QoS and 2 data VLs or more (it
# puts its two QoS levels and its datelines on VLs: 8 give it both).
TORUS_ENGINE = "torus-2QoS"
TORUS_SIZES = {1000: "torus:5x5x5,hosts=7,vls=8", 5000: "torus:10x10x10,hosts=4,vls=8",
               10000: "torus:10x10x10,hosts=9,vls=8"}
ENGINES = ("minhop", "updn", "ftree", "dfsssp", TORUS_ENGINE)
OPENSM_CONF = "/run/pib-scale-opensm.conf"
TORUS_CONF = "/run/pib-torus-2QoS.conf"
LOG = "/run/opensm.log"
# opensm's first sweep of 10,000 nodes from a TCG guest takes minutes.
SUBNET_UP_TIMEOUT_S = 1800
_STAMP = re.compile(r"^(\w{3} \d\d \d\d:\d\d:\d\d) (\d{6}) ")


def _events(log: str) -> list:
    """(seconds, text) per line of an opensm log with verbose messages: a
    banner line (`*** HEAVY SWEEP COMPLETE ***`) takes the time of the
    stamped line before it. Seconds are since the day began."""
    out, now = [], None
    for line in log.splitlines():
        m = _STAMP.match(line)
        if m:
            clock = datetime.strptime(m.group(1), "%b %d %H:%M:%S")
            now = clock.hour * 3600 + clock.minute * 60 + clock.second + int(m.group(2)) / 1e6
        if now is not None:
            out.append((now, line))
    return out


def _first(events, pattern: str, after: float = 0.0):
    for t, line in events:
        if t >= after and re.search(pattern, line):
            return t
    return None


def sweep_times(log: str) -> dict:
    """The first heavy sweep's stages, in seconds, from opensm's log."""
    ev = _events(log)
    start = _first(ev, r"INITIATING HEAVY SWEEP")
    found = _first(ev, r"HEAVY SWEEP COMPLETE", start or 0)
    route = _first(ev, r"ucast_mgr_route: building routing", found or 0)
    routed = _first(ev, r"tables configured on all switches", route or 0)
    lfts = _first(ev, r"SWITCHES CONFIGURED FOR UNICAST", routed or 0)
    up = _first(ev, r"SUBNET UP", lfts or 0)
    light = _first(ev, r"INITIATING LIGHT SWEEP", up or 0)
    light_done = _first(ev, r"LIGHT SWEEP COMPLETE", light or 0)

    def span(a, b):
        return round(b - a, 3) if a is not None and b is not None else None
    return {"discovery_s": span(start, found), "route_s": span(route, routed),
            "lfts_s": span(routed, lfts), "subnet_up_s": span(start, up),
            "light_sweep_s": span(light, light_done)}


def _proc_numbers(pid: int) -> dict:
    """The switch process's peak memory (MB) and CPU (s) so far."""
    status = Path(f"/proc/{pid}/status").read_text()
    hwm = int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    return {"rss_mb": round(hwm / 1024, 1), "cpu_s": round(ticks / 100, 1)}


def _guests_beside(fab) -> int:
    """QEMUs running on this machine that are not `fab`'s: other work that
    shared the CPUs with the measurement."""
    ours = {vm.pid for vm in fab.vms}
    count = 0
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().startswith("qemu-system") and int(comm.parent.name) not in ours:
                count += 1
        except OSError:  # a process that ended meanwhile
            continue
    return count


def _wait_log(vm: str, pattern: str, timeout: float, after_lines: int = 0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        out = fabric.sh_in(vm, f"tail -n +{after_lines + 1} {LOG} | grep -c '{pattern}' || true",
                           timeout=120).out.strip()
        if out and int(out.splitlines()[-1]) > 0:
            return
        if time.monotonic() > deadline:
            raise ui.StepFailed(f"opensm did not log {pattern!r} in {timeout:.0f} s")
        time.sleep(2)


# The lines sweep_times() reads, each with its time: a banner line takes
# the stamp of the line before it. Picked in the guest: the whole log of
# a sweep of 10,000 nodes is some 30 MB, more than the guest agent
# returns in one answer.
_PICK = ("awk '/^[A-Z][a-z][a-z] [0-9][0-9] [0-9:]+ [0-9]+ /{s=$1\" \"$2\" \"$3\" \"$4} "
         "/HEAVY SWEEP|LIGHT SWEEP|SUBNET UP|CONFIGURED FOR UNICAST|building routing|"
         "tables configured|num:128/{if ($0 ~ /^[A-Z][a-z][a-z] [0-9]/) print; "
         "else print s\" \"$0}'")


def _sweep_log(vm: str, after_lines: int = 0) -> str:
    """The log's lines sweep_times() reads, from line `after_lines` + 1."""
    return fabric.sh_in(vm, f"tail -n +{after_lines + 1} {LOG} | {_PICK}", timeout=600).out


def _log_lines(vm: str) -> int:
    return int(fabric.sh_in(vm, f"wc -l < {LOG}", timeout=120).out.strip() or 0)


def _inner_link(fab) -> tuple:
    """(GUID, port) of the first switch's first cable to another switch."""
    for (a, a_port), (b, _) in fab.links:
        if fab.nodes[a].switch and fab.nodes[b].switch:
            return fab.nodes[a].guid, a_port
    raise ui.StepFailed("the fabric has no cable between two switches")


def spec_of(size: int, engine: str) -> str:
    return (TORUS_SIZES if engine == TORUS_ENGINE else SIZES)[size]


def _opensm_config(vm: str, engine: str, fab_model) -> None:
    """opensm.conf for `engine`: torus-2QoS also gets QoS and its
    torus-2QoS.conf."""
    conf = f"routing_engine {engine}\nlog_flags 0x87\n"
    if engine == TORUS_ENGINE:
        fabric.sh_in(vm, f"printf '%s' '{sim_fabric.torus_2qos_conf(fab_model)}' > {TORUS_CONF}")
        conf += f"qos TRUE\ntorus_config {TORUS_CONF}\n"
    fabric.sh_in(vm, f"printf '{conf}' > {OPENSM_CONF}")


def measure(size: int, engine: str, accel: str) -> dict:
    """One fabric of `size` nodes routed by `engine`: its numbers."""
    spec = spec_of(size, engine)
    fab_model = sim_fabric.parse_spec(spec)
    ui.step(f"{spec} ({len(fab_model.nodes)} nodes) with opensm's {engine}")
    topo = topology.simulated(spec, 2)
    fab = fabric.up(vms=2, accel=accel, topology=topo, sm=False, boot=True)
    try:
        vm = fab.vms[0].name
        pid = fab.ib_switch_pids["fabric"]
        _opensm_config(vm, engine, fab_model)
        beside = _guests_beside(fab)
        started = time.monotonic()
        fabric.sh_in(vm, f"rm -f {LOG}; PIB_SM_CONFIG={OPENSM_CONF} pib-start-sm")
        _wait_log(vm, "SUBNET UP", SUBNET_UP_TIMEOUT_S)
        wall = time.monotonic() - started
        log = _sweep_log(vm)
        result = {"spec": spec, "nodes": len(fab_model.nodes),
                  "revision": bench_summary.revision(outputs=(RESULTS, DOC)),
                  "switches": len(fab_model.switches), "cas": len(fab_model.cas),
                  "engine": engine, "accel": accel, "wall_s": round(wall, 1),
                  "date": date.today().isoformat(), "guests_beside": beside, **sweep_times(log)}
        result["engine_used"] = engine if f"'{engine}'" in log and \
            f"{engine} tables configured" in log else "fallback: " + \
            (re.findall(r"(\w+) tables configured on all switches", log) or ["none"])[-1]
        # A light sweep (every 10 s), then a link pulled: Trap 128 and a
        # heavy sweep that routes around it.
        lines = _log_lines(vm)
        _wait_log(vm, "LIGHT SWEEP COMPLETE", 300, lines)
        result["light_sweep_s"] = sweep_times(_sweep_log(vm))["light_sweep_s"]
        guid, port = _inner_link(fab_model)
        lines = _log_lines(vm)
        fabric.switch_control(fab, "fabric", f"link {guid:#x} {port} down")
        _wait_log(vm, "SUBNET UP", SUBNET_UP_TIMEOUT_S, lines)
        ev = _events(_sweep_log(vm, lines))
        trap = _first(ev, r"num:128")
        up = _first(ev, r"SUBNET UP", trap or 0)
        result["after_link_down_s"] = round(up - trap, 3) if trap and up else None
        result.update(_proc_numbers(pid))
        result["bytes_per_node"] = round(result["rss_mb"] * 1024 * 1024 / result["nodes"])
        return result
    finally:
        fabric.down(quiet=True)


def run(sizes, engines, accel: str) -> int:
    results = load()
    for size in sizes:
        for engine in engines:
            key = f"{size} {engine}"
            try:
                results[key] = measure(size, engine, accel)
            except ui.StepFailed as e:
                results[key] = {"spec": spec_of(size, engine), "engine": engine,
                                "error": str(e)[:300], "accel": accel,
                                "date": date.today().isoformat(),
                                "revision": bench_summary.revision(outputs=(RESULTS, DOC))}
            RESULTS.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
            write_doc(results)
            ui.info(render_row(results[key]))
    return 0


def load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.exists() else {}


def _s(v) -> str:
    return "-" if v is None else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def render_row(r: dict) -> str:
    if r.get("error"):
        return (f"| {r['spec']} | | {r['engine']} | failed: {r['error']} | | | | | | | | "
                f"{_measured(r)} |")
    return (f"| {r['spec']} | {r['nodes']:,} ({r['switches']:,} switches) | {r['engine']}"
            f"{'' if r['engine_used'] == r['engine'] else ' (' + r['engine_used'] + ')'} | "
            f"{_s(r['discovery_s'])} | {_s(r['route_s'])} | {_s(r['lfts_s'])} | "
            f"{_s(r['subnet_up_s'])} | {_s(r['light_sweep_s'])} | {_s(r['after_link_down_s'])} | "
            f"{r['rss_mb']:.0f} MB, {r['bytes_per_node']:,} B/node | {r['cpu_s']:.0f} s | "
            f"{_measured(r)} |")


def _measured(r: dict) -> str:
    """The day, the accelerator, the commit (rows before 9a44951 did not
    keep it) and the guests running beside."""
    beside = r.get("guests_beside", 0)
    return (f"{r['date']}, {r['accel']}" + (f", {r['revision']}" if r.get("revision") else "") +
            (f", {beside} other guests running" if beside else ""))


def not_run(results: dict) -> list:
    """The (size, engine) rows the table lacks."""
    return [f"{engine} at {size:,}" for size in SIZES for engine in ENGINES
            if f"{size} {engine}" not in results]


def render(results: dict) -> str:
    head = ("| fabric | nodes | routing engine | discovery (s) | route (s) | LFTs (s) | "
            "SUBNET UP (s) | light sweep (s) | after a link down (s) | switch process | "
            "its CPU | measured |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    def order(key):
        size, engine = key.split()
        return int(size), ENGINES.index(engine) if engine in ENGINES else 99
    missing = not_run(results)
    return head + "\n".join(render_row(results[k]) for k in sorted(results, key=order)) + "\n" + \
        (f"\nNot run: {', '.join(missing)}.\n" if missing else "")


def write_doc(results: dict) -> None:
    text = DOC.read_text()
    a, b = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    DOC.write_text(text[:a] + "\n\n" + render(results) + "\n" + text[b:])


def doc_is_current() -> str:
    """'' when docs/scale.md's table is the rendering of the results."""
    text = DOC.read_text()
    a, b = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    if text[a:b].strip() != render(load()).strip():
        return "docs/scale.md's table is not docs/scale-results.json's: ./pib bench --scale"
    return ""
