"""The driver developer's workbench (docs/user-guide.md, "Packet capture"
and "Inspecting a device"): packets captured at a switch port and at a
device port decode in tshark as the InfiniBand they are, and the host's
view of a device (QEMU's `info pib`, QMP x-pib-query, ./pib inspect)
agrees with what the guest's driver says in debugfs."""

import json
import re
import shutil
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest

import iba
from pibctl import qmp
from pibctl.pairs import run_pair, tcp_listening
from transfers import traffic

from guest_scripts import EQ_SCRIPT, HOLD_OBJECTS_SCRIPT, INJECTION_SCRIPT, VECTORS_SCRIPT

pytestmark = pytest.mark.errors_on_purpose(
    "packets corrupted on purpose count in the receiver's PortRcvErrors")

# BTH opcodes (IBA table 38) of reliable connection packets.
RC = {0x00: "SEND First", 0x01: "SEND Middle", 0x02: "SEND Last", 0x04: "SEND Only",
      0x0C: "RDMA READ Request", 0x0D: "RDMA READ Response First",
      0x0E: "RDMA READ Response Middle", 0x0F: "RDMA READ Response Last",
      0x10: "RDMA READ Response Only", 0x11: "Acknowledge"}
SUBN_GET, SUBN_SET = 0x01, 0x02
NODE_INFO, PORT_INFO = 0x0011, 0x0015
FIELDS = ["frame.number", "infiniband.lrh.dlid", "infiniband.lrh.slid", "infiniband.bth.opcode",
          "infiniband.bth.destqp", "infiniband.bth.psn", "infiniband.mad.method",
          "infiniband.mad.attributeid"]


def _tshark(path, *args):
    proc = subprocess.run(["tshark", "-r", str(path), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"tshark {' '.join(args)}: {proc.stderr}"
    return proc.stdout


def _decode(path):
    """Every packet as tshark dissects it: a dict of FIELDS (ints or None)."""
    out = _tshark(path, "-T", "fields", "-E", "separator=,", "-E", "occurrence=f",
                  *[a for f in FIELDS for a in ("-e", f)])
    rows = []
    for line in out.splitlines():
        values = line.split(",")
        rows.append({f: int(v, 0) if v else None for f, v in zip(FIELDS, values)})
    return rows


def _check_wellformed(path, packets):
    """tshark finds nothing malformed or wrong, and each packet's ICRC and
    VCRC are right (tshark 4.0 does not check them: iba.crcs_ok does)."""
    bad = _tshark(path, "-Y", "_ws.malformed || _ws.expert.severity >= 8388608")  # error
    assert not bad.strip(), f"tshark reports malformed or erroneous packets in {path}:\n{bad}"
    for n, packet in enumerate(packets, 1):
        icrc, vcrc = iba.crcs_ok(packet)
        raw = packet[1] & 3 in (0, 1)
        assert vcrc and (icrc or raw), f"{path}: packet {n}: ICRC {icrc}, VCRC {vcrc}"


def _check_rc_psns(rows):
    """Within each QP's stream the PSNs are IBA's: a message's packets
    consecutive, a READ's responses starting at its request's PSN, each
    ACK for a PSN a request packet had. Returns the opcodes seen."""
    requests = defaultdict(list)  # destination QP -> [(opcode, psn)]
    seen = set()
    for r in rows:
        op, qp, psn = r["infiniband.bth.opcode"], r["infiniband.bth.destqp"], r["infiniband.bth.psn"]
        if op not in RC:
            continue
        seen.add(op)
        requests[qp].append((op, psn))
    # Requests to one QP and the responses coming back to its peer are in
    # different streams; pair them by PSN.
    all_request_psns = {psn for stream in requests.values() for op, psn in stream
                        if op in (0x00, 0x01, 0x02, 0x04, 0x0C)}
    reads = {psn for stream in requests.values() for op, psn in stream if op == 0x0C}
    for qp, stream in requests.items():
        for (op, psn), (next_op, next_psn) in zip(stream, stream[1:]):
            if op in (0x00, 0x01) and next_op in (0x01, 0x02):
                assert next_psn == (psn + 1) & 0xFFFFFF, f"QP {qp}: {RC[op]} {psn} then {RC[next_op]} {next_psn}"
            if op in (0x0D, 0x0E) and next_op in (0x0E, 0x0F):
                assert next_psn == (psn + 1) & 0xFFFFFF, f"QP {qp}: {RC[op]} {psn} then {RC[next_op]} {next_psn}"
        for op, psn in stream:
            if op in (0x0D, 0x10):
                assert psn in reads, f"QP {qp}: {RC[op]} at PSN {psn}, which no READ asked for"
            if op == 0x11:
                assert psn in all_request_psns, f"QP {qp}: ACK for PSN {psn}, which no request had"
    return seen


def _capture(ctx, spec, path, run):
    """Captures at `spec` while `run` runs, through ./pib capture."""
    started = ctx.pib("capture", spec, "-w", str(path), "--start")
    assert started.returncode == 0, started.stderr
    try:
        run()
    finally:
        stopped = ctx.pib("capture", spec, "--stop")
    assert stopped.returncode == 0, stopped.stderr
    answer = stopped.stdout.strip()
    print(f"  {spec}: {answer}")
    linktype, packets, _ = iba.read_pcap(path)
    assert linktype == iba.LINKTYPE_ERF, linktype
    assert packets, answer
    return packets


def test_captures_decode_in_tshark_as_an_sm_sweep_rc_sends_and_reads(ctx):
    where = Path(tempfile.mkdtemp(prefix="pib-capture-"))
    sweep = where / "sweep.pcap"
    rc = where / "rc.pcap"

    def sweep_and_traffic():
        ctx.restart_sm()  # opensm's first sweep: Get(NodeInfo) everywhere, Set(PortInfo)
        argv = ["ibv_rc_pingpong", "-s", "4096", "-m", "1024", "-n", "4", "-p", "18690"]
        client, server_out, status = run_pair(ctx, argv, argv, port=18690, timeout=120)
        assert client.exitcode == 0 and status == "0", f"{client.out}{client.err}\n{server_out}"
        traffic(ctx, ["-t", "read", "-s", "5000", "-n", "3", "-q", "1"], port=18691)

    # The switch port vm1 (and opensm) is cabled to, and vm2's own port.
    vm1 = ctx.fabric.vm("vm1")
    switch_spec = f"{vm1.switch}:{vm1.switch_port}"
    packets = _capture(ctx, switch_spec, sweep,
                       lambda: _capture(ctx, "vm2", rc, sweep_and_traffic))
    _, rc_packets, sent = iba.read_pcap(rc)
    assert any(sent) and not all(sent), "vm2's capture has both directions"

    for path, pkts in ((sweep, packets), (rc, rc_packets)):
        _check_wellformed(path, pkts)
    rows = _decode(sweep)
    smps = {(r["infiniband.mad.method"], r["infiniband.mad.attributeid"]) for r in rows}
    assert (SUBN_GET, NODE_INFO) in smps, smps
    assert (SUBN_SET, PORT_INFO) in smps, smps
    rc_rows = _decode(rc)
    seen = _check_rc_psns(rc_rows)
    for op in (0x00, 0x01, 0x02, 0x0C, 0x0D, 0x0F, 0x11):
        assert op in seen, f"no {RC[op]} in vm2's capture: {sorted(seen)}"
    print(f"  {switch_spec}: {len(packets)} packets, {sum(1 for r in rows if r['infiniband.mad.method'])} "
          f"MADs; vm2 port 1: {len(rc_packets)} packets, RC opcodes "
          + ", ".join(RC[o] for o in sorted(seen)))
    # What a user reads: one RC exchange and a READ, decoded, with PSNs.
    for opcodes in ("infiniband.bth.opcode <= 0x04 || infiniband.bth.opcode == 0x11",
                    "infiniband.bth.opcode >= 0x0c && infiniband.bth.opcode <= 0x10"):
        summary = _tshark(rc, "-Y", f"({opcodes}) && infiniband.bth.destqp > 1", "-T", "fields",
                          "-e", "frame.number", "-e", "infiniband.lrh.slid", "-e",
                          "infiniband.lrh.dlid", "-e", "infiniband.bth.destqp", "-e",
                          "infiniband.bth.psn", "-e", "_ws.col.Info")
        print("\n".join("    " + line for line in summary.splitlines()[:8]))
    shutil.rmtree(where)


def _debugfs(ctx, vm, name):
    lines = ctx.run(vm, ["cat", f"/sys/kernel/debug/pib/pib_0/{name}"]).out.splitlines()[1:]
    return [line.split() for line in lines]


def test_inspection_agrees_with_the_drivers_debugfs(ctx):
    ctx.sh("vm1", "rm -f /tmp/hold.release /tmp/hold.out; (python3 - >/tmp/hold.out 2>&1 "
                  "<<'EOF'\n" + HOLD_OBJECTS_SCRIPT + "\nEOF\n) >/dev/null 2>&1 &")
    deadline = time.monotonic() + 30
    while "ready" not in (held := ctx.run("vm1", ["cat", "/tmp/hold.out"], check=False).out):
        assert time.monotonic() < deadline, f"the objects were not made:\n{held}"
        time.sleep(0.3)
    try:
        _, key, qpn, lid = held.split()[:4]
        assert "completions 2" in held, held
        state = json.loads(ctx.pib("inspect", "vm1", "--json").stdout)
        debug_qps, debug_cqs = _debugfs(ctx, "vm1", "qp"), _debugfs(ctx, "vm1", "cq")
        debug_mrs, debug_srqs = _debugfs(ctx, "vm1", "mr"), _debugfs(ctx, "vm1", "srq")
        qp_text = ctx.pib("inspect", "vm1", "qp", qpn)
        mr_text = ctx.pib("inspect", "vm1", "mr", key)
    finally:
        ctx.run("vm1", ["touch", "/tmp/hold.release"])
    assert state["state"] == "running", state
    assert state["ports"][0]["state"] == "ACTIVE", state["ports"]
    device_qps = {q["qpn"]: q for q in state["qps"]}
    for row in debug_qps:
        number, _, _, qp_state, port, sq, rq = row
        q = device_qps.get(int(number))
        assert q, f"debugfs QP {row} is not in the device: {sorted(device_qps)}"
        assert q["state"] == qp_state and q["port"] == int(port), (row, q)
        assert q["sq"]["size"] == int(sq.split("/")[2]), (row, q)
        if rq.split("/")[2] != "0":
            assert q["rq"]["size"] == int(rq.split("/")[2]), (row, q)
    assert len(device_qps) == len(debug_qps), (sorted(device_qps), debug_qps)
    device_cqs = {c["cqn"]: c for c in state["cqs"]}
    assert sorted(device_cqs) == sorted(int(r[0]) for r in debug_cqs), (device_cqs, debug_cqs)
    for row in debug_cqs:
        assert device_cqs[int(row[0])]["queue"]["size"] == int(row[1]), (row, device_cqs)
    device_mrs = {m["key"]: m for m in state["mrs"]}
    for row in debug_mrs:
        m = device_mrs.get(int(row[0], 16))
        assert m and m["pd"] == int(row[1]) and m["access"] == int(row[2], 16), (row, m)
        assert m["iova"] == int(row[3], 16) and m["length"] == int(row[4], 16), (row, m)
    assert len(device_mrs) == len(debug_mrs)
    assert sorted(s["srqn"] for s in state["srqs"]) == sorted(int(r[0]) for r in debug_srqs)
    print(f"  vm1: {len(device_qps)} QPs, {len(device_cqs)} CQs, {len(device_mrs)} MRs, "
          f"{len(state['srqs'])} SRQs; each as debugfs has it")
    assert qp_text.returncode == 0, qp_text.stderr
    # Connected to itself, it sent itself 3000 bytes: three packets from
    # PSN 100, all acknowledged and received.
    for expect in (r"type RC\s+state RTS", rf"dlid {lid}\s+dest_qpn {qpn}\s+mtu 1024",
                   r"next_psn 103\s+unacked_psn 103\s+in_flight 0",
                   r"expected_psn 103\s+msn 1"):
        assert re.search(expect, qp_text.stdout), f"{expect}:\n{qp_text.stdout}"
    assert mr_text.returncode == 0 and f"key {key}" in mr_text.stdout, mr_text.stdout
    print("  ./pib inspect vm1 qp " + qpn + ":\n" + "\n".join(
        "    " + line for line in qp_text.stdout.splitlines()))
    missing = ctx.pib("inspect", "vm1", "qp", "999999")
    assert missing.returncode == 1 and "no qp 999999" in missing.stdout, missing.stdout
    # The HMP commands, as a user types them in QEMU's monitor.
    for line, expect in (("info pib hca0 port 1", "state ACTIVE"),
                         ("pib_inject hca0 drop 99999 1", "armed: drop 99999 1"),
                         ("pib_inject clear", "nothing armed"),
                         ("pib_inject hca0 bogus", "unknown injection 'bogus'"),
                         ("pib_capture 1 /tmp/pib-hmp.pcap 5", "capturing to /tmp/pib-hmp.pcap"),
                         ("pib_capture hca0 1 stop", "port 1: captured")):
        out = qmp.command(ctx.fabric.vm("vm1").path / "qmp.sock", "human-monitor-command",
                                  **{"command-line": line})
        assert expect in out, f"{line}: {out}"
    Path("/tmp/pib-hmp.pcap").unlink(missing_ok=True)
    print("  HMP: info pib, pib_inject and pib_capture answer as documented")


# What the test facilities' test expects each injected event to become in
# user space (IBV_EVENT_ names).
INJECTED_EVENTS = {"qp-fatal RC": "QP_FATAL", "path-mig RC": "PATH_MIG", "cq-err CQ": "CQ_ERR",
                   "srq-limit SRQ": "SRQ_LIMIT_REACHED", "port-err 1": "PORT_ERR",
                   "port-active 1": "PORT_ACTIVE"}


class _Injections:
    """A guest script (INJECTION_SCRIPT, EQ_SCRIPT) running in a VM, driven
    phase by phase while the host injects."""

    def __init__(self, ctx, vm, script=INJECTION_SCRIPT):
        self.ctx, self.vm = ctx, vm
        ctx.sh(vm, "rm -f /tmp/inject.* /tmp/injection.out; (timeout 300 python3 - "
                   ">/tmp/injection.out 2>&1 <<'EOF'\n" + script + "\nEOF\n"
                   ") >/dev/null 2>&1 &")
        self.output = ""
        self.wait_for(r"^ready")

    def wait_for(self, pattern, seconds=60):
        deadline = time.monotonic() + seconds
        while not (m := re.search(pattern, self.output, re.M)):
            assert time.monotonic() < deadline, f"{self.vm}: no '{pattern}' in:\n{self.output}"
            time.sleep(0.3)
            self.output = self.ctx.run(self.vm, ["cat", "/tmp/injection.out"], check=False).out
        return m

    def inject(self, *words):
        result = self.ctx.pib("inject", self.vm, *words)
        assert result.returncode == 0, f"./pib inject {' '.join(words)}: {result.stderr}"
        return result.stdout.strip()

    def run_phase(self, n):
        self.ctx.run(self.vm, ["touch", f"/tmp/inject.{n}"])


def _user_cq_and_srq(ctx, vm):
    """The device numbers of the script's first CQ and its SRQ (the only
    one with 3 SGEs), from the driver's debugfs."""
    cqs = [int(r[0]) for r in _debugfs(ctx, vm, "cq") if r[4] == "yes"]
    srqs = [int(r[0]) for r in _debugfs(ctx, vm, "srq") if r[2] == "3"]
    assert len(cqs) == 1 and len(srqs) == 1, (cqs, srqs)
    return cqs[0], srqs[0]


def test_each_injection_is_seen_by_the_guest(ctx):
    vm = "vm2"  # vm1 runs opensm
    script = _Injections(ctx, vm)
    ud_qpn, rc_qpn = (int(n) for n in script.wait_for(r"^ready (\d+) (\d+)$").groups())
    cqn, srqn = _user_cq_and_srq(ctx, vm)

    # A command fails once with the status asked for: the driver turns
    # NO_RESOURCES into ENOMEM, and the next CREATE_CQ runs.
    print("  " + script.inject("command", "CREATE_CQ", "NO_RESOURCES"))
    armed = json.loads(ctx.pib("inspect", vm, "--json").stdout)["injections"]
    assert armed == [{"command": 0x28, "status": 5}], armed
    script.run_phase(1)
    script.wait_for(r"^created-cq ok$")
    assert re.search(r"^created-cq errno 12$", script.output, re.M), script.output
    print("    guest: CQ creation failed with ENOMEM, the next one succeeded")

    # A send WQE completes with the status and vendor_err asked for.
    print("  " + script.inject("wqe", str(ud_qpn), "LOC_PROT_ERR", "0x42"))
    script.run_phase(2)
    m = script.wait_for(r"^wc 1 status (\d+) vendor_err (\S+)$")
    assert m.groups() == ("4", "0x42"), script.output
    assert script.wait_for(r"^qp state (\d+)$").group(1) == "6", script.output  # ERR
    print("    guest: the send completed with status 4 (LOC_PROT_ERR), vendor_err 0x42; "
          "the QP is in ERR")

    # Any async event reaches the consumer that owns the object.
    numbers = {"RC": rc_qpn, "CQ": cqn, "SRQ": srqn}
    for what in INJECTED_EVENTS:
        name, obj = what.split()
        print("  " + script.inject("event", name, str(numbers.get(obj, obj))))
    script.run_phase(3)
    script.wait_for(r"(^event \S+\n){7}")
    got = re.findall(r"^event (\S+)$", script.output, re.M)
    assert got[0] == "QP_FATAL", got  # the UD QP's, from its failed send
    assert sorted(got[1:]) == sorted(INJECTED_EVENTS.values()), got
    print("    guest: " + ", ".join(got[1:]))

    # A stopped CQ overruns: the consumer hears CQ_ERR and finds nothing;
    # resumed, it completes again.
    print("  " + script.inject("stop", "cq", str(cqn)))
    script.run_phase(4)
    assert script.wait_for(r"^polled (\d+)$").group(1) == "0", script.output
    assert re.findall(r"^event (\S+)$", script.output, re.M)[7:] == ["CQ_ERR"], script.output
    print("  " + script.inject("resume", "cq", str(cqn)))
    script.run_phase(5)
    script.wait_for(r"^polled (\d+)\n(.|\n)*^polled (\d+)$")
    assert re.findall(r"^polled (\d+)$", script.output, re.M) == ["0", "2"], script.output
    print("    guest: CQ_ERR and nothing to poll while stopped; 2 completions once resumed")


def test_dropped_and_corrupted_packets_are_resent_by_rc(ctx):
    """The server's QP loses its first 3 packets and corrupts the next 2;
    ibv_rc_pingpong still finishes, and vm1's port counts the 2 corrupt
    packets as receive errors."""
    def errors():
        state = json.loads(ctx.pib("inspect", "vm1", "--json").stdout)
        return state["ports"][0]["counters"]["rcv_errors"]

    armed = []

    def listening_then_inject(ctx_, vm, output):
        m = re.search(r"local address:.*QPN 0x([0-9a-f]+)", output())
        if not m or not tcp_listening(18695)(ctx_, vm, output):
            return False
        if not armed:
            qpn = int(m.group(1), 16)
            armed.append(ctx.pib("inject", "vm2", "drop", str(qpn), "3").stdout.strip())
            armed.append(ctx.pib("inject", "vm2", "corrupt", str(qpn), "2").stdout.strip())
        return True

    before = errors()
    counters_before = {vm: _hw_counters(ctx, vm) for vm in ("vm1", "vm2")}
    argv = ["ibv_rc_pingpong", "-s", "4096", "-n", "20", "-p", "18695"]
    client, server_out, status = run_pair(ctx, ["stdbuf", "-oL", *argv], argv, port=18695,
                                          timeout=120, ready=listening_then_inject)
    assert client.exitcode == 0 and status == "0", f"{client.out}{client.err}\n{server_out}"
    print("  " + "; ".join(armed))
    assert errors() - before == 2, (before, errors())
    assert json.loads(ctx.pib("inspect", "vm2", "--json").stdout)["injections"] == []
    print("  ibv_rc_pingpong: 20 iterations of 4096 B done; vm1's port counted 2 receive errors")
    # rdma statistic shows the resends the lost packets caused.
    delta = {vm: {k: v - counters_before[vm].get(k, 0) for k, v in _hw_counters(ctx, vm).items()}
             for vm in ("vm1", "vm2")}
    for vm in ("vm1", "vm2"):
        assert delta[vm]["sent_pkts"] >= 40 and delta[vm]["rcvd_pkts"] >= 40, delta
    resent = (delta["vm1"]["ack_timeout"] + delta["vm1"]["rcvd_seq_err"] +
              delta["vm2"]["ack_timeout"] + delta["vm2"]["rcvd_seq_err"])
    assert resent >= 1 and delta["vm2"]["duplicate_request"] + delta["vm1"]["duplicate_request"] >= 1, delta
    stat = ctx.run("vm1", ["rdma", "statistic", "show", "link", "pib_0/1"]).out.strip()
    assert "sent_pkts" in stat and "ack_timeout" in stat, stat
    print(f"  rdma statistic (vm1): {stat}")
    print("  counters during the test: " + "; ".join(
        f"{vm} " + " ".join(f"{k} +{v}" for k, v in sorted(d.items()) if v) for vm, d in delta.items()))


def _interrupts(ctx, vm):
    """{irq name: count over all CPUs} of the pib-hca's MSI-X vectors."""
    counts = {}
    for line in ctx.run(vm, ["cat", "/proc/interrupts"]).out.splitlines():
        fields = line.split()
        if fields and fields[-1].startswith("pib-"):
            counts[fields[-1]] = sum(int(f) for f in fields[1:] if f.isdigit())
    return counts


def test_completion_events_come_on_the_cq_vector(ctx):
    """Each completion vector has an EQ and an MSI-X interrupt of its own:
    a CQ created on vector V signals through pib-compV."""
    before = _interrupts(ctx, "vm2")
    out = ctx.run("vm2", ["timeout", "60", "python3", "-"], stdin=VECTORS_SCRIPT.encode()).out
    after = _interrupts(ctx, "vm2")
    vectors = int(re.search(r"^vectors (\d+)$", out, re.M).group(1))
    assert vectors >= 2, out
    assert re.findall(r"^vector (\d+) event$", out, re.M) == [str(v) for v in range(vectors)], out
    for v in range(vectors):
        name = f"pib-comp{v}"
        assert after.get(name, 0) > before.get(name, 0), (name, before, after)
    print(f"  vm2: {vectors} completion vectors; a CQ on each got its event through its own "
          "interrupt: " + ", ".join(f"pib-comp{v} +{after[f'pib-comp{v}'] - before.get(f'pib-comp{v}', 0)}"
                                    for v in range(vectors)))


def _hw_counters(ctx, vm):
    out = ctx.sh(vm, "cd /sys/class/infiniband/pib_0/ports/1/hw_counters && "
                     "for f in *; do echo $f $(cat $f); done").out
    return {name: int(value) for name, value in (line.split() for line in out.splitlines())}


def test_a_stopped_completion_eq_signals_nothing_until_resumed(ctx):
    """The EQ of completion vector 1 stopped: a CQ on that vector gets its
    completions but no event and no interrupt, and the EQ overruns; once
    resumed, the next completion signals as usual."""
    vm = "vm2"
    script = _Injections(ctx, vm, EQ_SCRIPT)
    eqs = json.loads(ctx.pib("inspect", vm, "--json").stdout)["eqs"]
    eqn = next(q["eqn"] for q in eqs if q["vector"] == 2)  # vector 1's EQ: MSI-X 1 + 1
    before = _interrupts(ctx, vm)["pib-comp1"]
    print("  " + script.inject("stop", "eq", str(eqn)))
    script.run_phase(1)
    assert script.wait_for(r"^polled (\d+)$").group(1) == "2", script.output
    stopped = json.loads(ctx.pib("inspect", vm, "eq", str(eqn), "--json").stdout)
    assert stopped["stopped"] and stopped["overrun"], stopped
    assert _interrupts(ctx, vm)["pib-comp1"] == before
    print("  " + script.inject("resume", "eq", str(eqn)))
    script.run_phase(2)
    script.wait_for(r"^event\npolled 2$")
    assert _interrupts(ctx, vm)["pib-comp1"] > before
    print("    guest: 2 completions and no interrupt while stopped (the EQ overran); "
          "after resume the CQ's event came on pib-comp1")
