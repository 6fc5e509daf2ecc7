"""Transfers between guests whose every byte is checked: helpers that
several test modules share."""

import re
import time

from guest_scripts import TCP_SINK_SCRIPT, TCP_SOURCE_SCRIPT
from pibctl.pairs import device_states, run_pair, tcp_listening


def bulk_tcp(ctx, megabytes, port, timeout=240, source_vm="vm1", sink_vm="vm2"):
    """`megabytes` MiB of random bytes from source_vm to sink_vm over TCP on
    IPoIB; the byte count and SHA-256 must match on both ends. Returns MB/s."""
    ctx.sh(source_vm, f"head -c {megabytes}M /dev/urandom > /tmp/bulk")
    sink = ["python3", "-c", TCP_SINK_SCRIPT, str(port)]
    source = ["python3", "-c", TCP_SOURCE_SCRIPT, "/tmp/bulk", str(port)]
    client, server_out, rc = run_pair(ctx, sink, source, port=port, timeout=timeout,
                                      server_vm=sink_vm, client_vm=source_vm,
                                      address=f"{sink_vm}-ib")
    assert client.exitcode == 0 and rc == "0", f"source:\n{client.out}{client.err}\nsink:\n{server_out}"
    sent_bytes, sent_hash, mbps = client.out.split()
    got_bytes, got_hash = server_out.split()
    assert sent_bytes == got_bytes == str(megabytes << 20), (client.out, server_out)
    assert sent_hash == got_hash, (client.out, server_out)
    return float(mbps)


TRAFFIC_LINE = (r"^(?P<test>[\w-]+)\s+(?P<qps>\d+) QPs\s+(?P<messages>\d+) messages\s+"
                r"(?P<bytes>\d+) bytes\s+(?P<lost>\d+) lost\s+(?P<errors>\d+) errors "
                r"sha256 (?P<sha>[0-9a-f]{64})(?: events (?P<events>\d+))?$")


def _traffic_lines(output):
    return {m["test"]: m.groupdict() for m in re.finditer(TRAFFIC_LINE, output, re.M)}


def _switch_stalls(ctx):
    """The switches' reports of an output that took nothing for its
    head-of-queue lifetime (its packets are then discarded, which UC and
    UD lose): a failed transfer shows whether the fabric dropped
    something."""
    lines = _stall_lines(ctx)
    return "\nswitch stalls:\n" + ("\n".join(lines[-20:]) if lines else "none") + "\n"


def traffic(ctx, args=(), port=18800, timeout=900, expect_loss=False, client_vm="vm1",
            server_vm="vm2", server_args=()):
    """pib-traffic from client_vm to server_vm with `args` (the server's own
    options, such as its HCA port, in `server_args`): it must exit 0 at
    both ends, and each test's message count, byte count and SHA-256 must
    be the same at both ends (without `expect_loss`, with nothing lost).
    One exception, which the switch reports: a guest that took nothing
    from its cable for its port's head-of-queue lifetime (a starved QEMU
    on a loaded host) has its packets discarded meanwhile, so UC and UD, which are unreliable, may
    lose messages then; RC still loses nothing, and what arrived is still
    the same at both ends. Returns {test: {messages, bytes, lost, sha,
    ...}} and prints a line per test."""
    server = ["pib-traffic", "-p", str(port), *server_args]
    client = ["pib-traffic", "-p", str(port), *args]
    stalls_before = _stall_lines(ctx)
    result, server_out, rc = run_pair(ctx, server, client, port=port, timeout=timeout,
                                      server_vm=server_vm, client_vm=client_vm)
    stalls = [line for line in _stall_lines(ctx) if line not in set(stalls_before)]
    where = lambda: (f"client:\n{result.out}{result.err}\nserver:\n{server_out}"
                     + _switch_stalls(ctx) + device_states(ctx, (client_vm, server_vm)))
    sent, got = _traffic_lines(result.out), _traffic_lines(server_out)
    assert sent and sent.keys() == got.keys(), where()
    unreliable_lost = {name: line for name, line in sent.items()
                       if name.startswith(("uc-", "ud-")) and line["lost"] != "0"}
    # Without --lossy pib-traffic counts each lost UC/UD message as an error
    # too, and exits 1: allowed only for losses the switch's discards explain.
    excused = (stalls and not expect_loss and unreliable_lost
               and all(line["errors"] == line["lost"] for line in unreliable_lost.values()))
    if not excused:
        assert result.exitcode == 0 and rc == "0", f"client {result.exitcode}, server {rc}\n{where()}"
    for name, line in sent.items():
        other = got[name]
        for field in ("messages", "bytes", "lost", "errors", "sha"):
            assert line[field] == other[field], f"{name}: {field} differs\n{where()}"
        if not (excused and name in unreliable_lost):
            assert line["errors"] == "0", where()
            if not expect_loss:
                assert line["lost"] == "0", where()
        print(f"  {name:<11} {line['qps']} QPs {int(line['messages']):5d} messages "
              f"{int(line['bytes']):11d} bytes {int(line['lost']):3d} lost, "
              f"sha256 {line['sha'][:16]}... at both ends")
    if excused:
        print(f"  UC/UD lost {sum(int(l['lost']) for l in unreliable_lost.values())} messages "
              f"while the switch discarded packets to a port that took nothing: "
              + "; ".join(stalls))
    return sent


def _stall_lines(ctx):
    """Every report so far, in every switch's log, of an output that took
    nothing for its head-of-queue lifetime (see _switch_stalls)."""
    lines = []
    for switch in ctx.fabric.topo.switches:
        log = ctx.fabric.switch_log(switch.name)
        text = log.read_text(errors="replace") if log.exists() else ""
        lines += [f"{switch.name}: {line}" for line in text.splitlines() if "took nothing" in line]
    return lines


class BackgroundTraffic:
    """pib-traffic between vm1 (client) and vm2 (server), running in the
    background while a test does something to the fabric."""

    # Those started whose ends have not both been waited for. A test that
    # fails before it waits would leave its traffic running into the next
    # tests, on their fabric and their timing (conftest.py ends it).
    unfinished = []

    def __init__(self, ctx, args, port, timeout=600, client_vm="vm1", server_vm="vm2",
                 server_args=()):
        self.ctx, self.port, self.timeout = ctx, port, timeout
        self.client_vm, self.server_vm = client_vm, server_vm
        self.tag = f"/tmp/traffic-{port}"
        server = " ".join(["pib-traffic", "-p", str(port), *server_args])
        ctx.sh(server_vm, f"rm -f {self.tag}.*; (timeout {timeout} {server} >{self.tag}.out 2>&1; "
                          f"echo $? >{self.tag}.rc) </dev/null >/dev/null 2>&1 &")
        ready = tcp_listening(port)
        deadline = time.monotonic() + 30
        while not ready(ctx, server_vm, None):
            assert time.monotonic() < deadline, "pib-traffic's server did not listen in 30 s"
            time.sleep(0.3)
        client = " ".join(["pib-traffic", "-p", str(port), *args, server_vm])
        ctx.sh(client_vm, f"rm -f {self.tag}.*; (timeout {timeout} sh -c 'echo $$ >{self.tag}.pid; "
                          f"exec {client}' >{self.tag}.out 2>&1; "
                          f"echo $? >{self.tag}.rc) </dev/null >/dev/null 2>&1 &")
        BackgroundTraffic.unfinished.append(self)

    def end(self):
        """Kills what is left of both ends, at once."""
        for vm in (self.client_vm, self.server_vm):
            self.ctx.sh(vm, f"pkill -KILL -f '^pib-traffic -p {self.port}( |$)'; true", check=False)

    def running(self):
        return ctx_file(self.ctx, self.client_vm, f"{self.tag}.rc") is None

    def stop(self):
        """Asks the client to end early (SIGUSR1): the test under way ends
        once each size has been moved, and each test after it moves each
        size once. Sent once the client takes it: SIGUSR1 (0x200) blocked
        in its /proc/PID/status, which pib-traffic does first thing."""
        script = (f"for i in $(seq 100); do pid=$(cat {self.tag}.pid 2>/dev/null) && "
                  "grep -q '^SigBlk:.*[2367abef]..$' /proc/$pid/status && exec kill -USR1 $pid; "
                  "sleep 0.1; done; exit 1")
        result = self.ctx.sh(self.client_vm, script, check=False)
        assert result.exitcode == 0 or not self.running(), \
            f"pib-traffic in {self.client_vm} could not be asked to stop: {result}"

    def wait(self, server=True):
        """(client exit status, client output, server exit status or None,
        server output); waits at most the timeout given at the start."""
        deadline = time.monotonic() + self.timeout + 30
        while self.running():
            assert time.monotonic() < deadline, "pib-traffic did not finish"
            time.sleep(0.25)
        rc = int(ctx_file(self.ctx, self.client_vm, f"{self.tag}.rc"))
        out = ctx_file(self.ctx, self.client_vm, f"{self.tag}.out") or ""
        if not server:
            return rc, out, None, ""
        while ctx_file(self.ctx, self.server_vm, f"{self.tag}.rc") is None:
            assert time.monotonic() < deadline, "pib-traffic's server did not finish"
            time.sleep(0.25)
        if self in BackgroundTraffic.unfinished:
            BackgroundTraffic.unfinished.remove(self)
        return (rc, out, int(ctx_file(self.ctx, self.server_vm, f"{self.tag}.rc")),
                ctx_file(self.ctx, self.server_vm, f"{self.tag}.out") or "")


def on_demand_regions(ctx, vm):
    """vm's on-demand memory regions by kind, {"explicit": n, "implicit":
    n}, as `rdma resource` shows the driver's word on them (pib.ko and
    mlx5_ib alike: `drv_odp explicit`, `drv_odp implicit`)."""
    out = ctx.sh(vm, "rdma -dd resource show mr").out
    return {kind: out.count(f"odp {kind}") for kind in ("explicit", "implicit")}


def ctx_file(ctx, vm, path):
    """A guest file's text, or None if it is not there."""
    r = ctx.run(vm, ["cat", path], check=False)
    return r.out if r.exitcode == 0 else None


def same_at_both_ends(client_out, server_out):
    """Every test line the same at both ends, no errors: the data arrived."""
    sent, got = _traffic_lines(client_out), _traffic_lines(server_out)
    where = f"client:\n{client_out}\nserver:\n{server_out}"
    assert sent and sent == got, where
    assert all(line["errors"] == "0" and line["lost"] == "0" for line in sent.values()), where
    return sent


def xmit_bytes(ctx, vm, device=None):
    """Bytes vm's HCA port 1 has sent (the counter counts 4-byte words)."""
    device = device or ctx.fabric.vm(vm).device
    out = ctx.run(vm, ["cat", f"/sys/class/infiniband/{device}/ports/1/counters/port_xmit_data"]).out
    return int(out) * 4


# What a port sends once a transfer is under way: data, not the MADs it
# also sends.
UNDER_WAY = 256 << 10


def some_traffic_through(ctx, vm, longest_s, at_least=1):
    """Waits until `vm`'s port has sent `at_least` bytes more than now, or
    `longest_s`: a test that gives its traffic time to get going, or to go
    on through a moved guest's new QEMU, waits only as long as that takes
    (a saturated counter would not grow: the time alone does then, as
    before)."""
    deadline = time.monotonic() + longest_s
    first = xmit_bytes(ctx, vm)
    while xmit_bytes(ctx, vm) - first < at_least and time.monotonic() < deadline:
        time.sleep(0.1)


def moves_under_traffic(ctx, runs, vm, moves, counters, before):
    """`vm` moves `moves` times to a new QEMU (./pib fabric migrate) while
    `runs` (BackgroundTraffic, one or a list) go on, its switch port ACTIVE
    with its link up after each move; then the traffic is asked to stop
    and completes with every byte checked at both ends. Prints each move and how `counters(vm)` of
    the guests in `before` (their values before the traffic) grew."""
    from pibctl import fabric, migrate  # pylint: disable=import-outside-toplevel
    for n in range(moves):
        old = ctx.fabric.vm(vm).pid
        moved = migrate.migrate(ctx.fabric, vm)
        assert moved.pid != old and fabric.ours(moved.pid, ctx.fabric.run_dir)
        print(f"move {n + 1}: {vm} from QEMU {old} to {moved.pid}: downtime {moved.downtime_ms} "
              f"ms, migration {moved.total_ms} ms, {moved.ram_mb:.0f} MB of RAM")
        switch, port = ctx.fabric.vm(vm).cables[0]
        line = fabric.switch_port_states(ctx.fabric).get(f"{switch}:{port}", "?")
        assert "ACTIVE, link up" in line, line
        some_traffic_through(ctx, vm, 2.0)
    runs = runs if isinstance(runs, list) else [runs]
    spanned = [run.running() for run in runs]  # before they were asked to stop
    for run in runs:
        run.stop()
    moved_bytes, kinds = 0, 0
    for run in runs:
        rc, out, src, sout = run.wait()
        assert rc == 0 and src == 0, \
            f"{run.client_vm} to {run.server_vm}: client {rc}, server {src}\n{out}\n{sout}" \
            + _switch_stalls(ctx)
        lines = same_at_both_ends(out, sout)
        moved_bytes += sum(int(line["bytes"]) for line in lines.values())
        kinds += len(lines)
    assert all(spanned), "the traffic ended before the moves did"
    after = {guest: counters(guest) for guest in before}
    print(f"{moved_bytes} bytes in {kinds} transfers, every byte checked; "
          + "; ".join(f"{guest}: " + ", ".join(f"{k} +{after[guest][k] - before[guest][k]}"
                                               for k in after[guest])
                      for guest in after))

