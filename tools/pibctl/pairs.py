"""Client/server pairs across two guests: the server in vm2, started in
the background and waited for until it listens, the client in vm1."""

import re
import shlex
import time

from pibctl import fabric, ui


class GuestShell:
    """Commands in the running fabric's guests: the part of the tests'
    context that run_pair needs, for ./pib demo and ./pib bench."""

    def run(self, vm, argv, timeout=120, check=True, stdin=None):
        result = fabric.exec_in(vm, argv, timeout=timeout, stdin=stdin)
        if check and result.exitcode != 0:
            raise ui.StepFailed(f"{vm}: {' '.join(argv)} exited {result.exitcode}: {result.err}")
        return result

    def sh(self, vm, script, timeout=120, check=True):
        return self.run(vm, ["bash", "-c", script], timeout=timeout, check=check)


def perftest_last_row(output):
    """The last row of a perftest result table, split into fields (bytes,
    iterations, then the measurements), or None."""
    rows = [line.split() for line in output.splitlines() if re.match(r"^\s*\d+\s+\d+\s", line)]
    return rows[-1] if rows else None


def ipoib_up(ctx, vms=("vm1", "vm2")):
    """IPoIB configured on `vms` (vmN-ib), also after a driver reload."""
    for vm in vms:
        ctx.sh(vm, "pib-ipoib-up")


def tcp_listening(port):
    """A server is ready when it listens on TCP `port` (IPv4 or IPv6)."""
    hexport = f":{port:04X} "

    def ready(ctx, vm, output):
        out = ctx.run(vm, ["cat", "/proc/net/tcp", "/proc/net/tcp6"], check=False).out
        return any(hexport in line and line.split()[3] == "0A" for line in out.splitlines()
                   if not line.lstrip().startswith("sl"))
    return ready


def rdma_cm_listening(port):
    """A server is ready when an rdma_cm ID listens on `port`."""
    def ready(ctx, vm, output):
        out = ctx.run(vm, ["rdma", "resource", "show", "cm_id"], check=False).out
        return any("state LISTEN" in line and f":{port} " in line for line in out.splitlines())
    return ready


def output_contains(text):
    """A server is ready when its output holds `text`."""
    return lambda ctx, vm, output: text in output()


def device_states(ctx, vms=("vm1", "vm2")):
    """What each VM's pib-hca says about its RC and UC QPs (`info pib`):
    where a transfer that did not finish stands, PSNs and timers included."""
    from pibctl import monitor

    try:
        return "\n" + "".join(monitor.connected_qps(ctx.fabric, vm) for vm in vms)
    except Exception as e:  # a report must not hide the failure it reports
        return f"\n(the devices could not be inspected: {e})\n"


# perftest measures time in cycles of the TSC and learns their rate when
# it reports, after the transfer, by timing 200 busy waits of
# gettimeofday() against the TSC and fitting a line. A sample whose TSC
# read and gettimeofday() a preemption separates (of the vCPU thread on a
# loaded host, or of perftest by another guest task) is off the line by
# the preemption, and a long one spoils the fit (r^2 < 0.9). It is rare:
# CI saw r^2 0.88 on ib_send_bw's server, 150 calibrations in a loaded
# guest here never fell below 0.99. The bandwidth programs then exit 1
# ("Can't produce a report") though every message went through. With -F
# they report instead, their figures 0 or inf, and say why on stderr: the
# exit status is the transfer's alone, and such a run's figures are left
# out.
PERFTEST_FLAGS = ["-F"]
PERFTEST_UNCALIBRATED = "Correlation coefficient r^2"

# The perftest set the end-to-end tests run between two guests: (program,
# arguments, what the last table row must hold).
PERFTEST = [
    ("ib_send_bw", ["-s", "65536", "-n", "100"], "bw"),
    ("ib_write_bw", ["-s", "65536", "-n", "100"], "bw"),
    ("ib_read_bw", ["-s", "65536", "-n", "100"], "bw"),
    ("ib_atomic_bw", ["-n", "100"], "bw"),
    ("ib_send_lat", ["-s", "8", "-n", "100"], "lat"),
    ("ib_write_lat", ["-s", "8", "-n", "100"], "lat"),
    ("ib_read_lat", ["-s", "8", "-n", "100"], "lat"),
    ("ib_atomic_lat", ["-n", "100"], "lat"),
]


def perftest(prog, *args):
    """The argv of perftest's `prog` with `args` and PERFTEST_FLAGS."""
    return [prog, *PERFTEST_FLAGS, *args]


def perftest_figure(result, kind):
    """What a perftest client (`result` of a guest command) reports: the
    average MiB/s of a 'bw' program, the typical us of a 'lat' one; None
    when perftest could not learn its clock's rate (PERFTEST_FLAGS). A
    missing result row, or a figure of a calibrated run that is not above
    0, fails."""
    row = perftest_last_row(result.out)
    assert row, result.out + result.err
    if PERFTEST_UNCALIBRATED in result.err:
        return None
    # bw: bytes, iterations, peak MiB/s, average MiB/s, Mpps;
    # lat: bytes, iterations, min, max, typical, average ... (us)
    value = float(row[3] if kind == "bw" else row[4])
    assert value > 0, result.out + result.err
    return value


def perftest_shown(value, unit):
    """A figure of perftest_figure for a table."""
    return f"{value:.2f} {unit}" if value is not None else "(clock not calibrated)"


# How often the server is looked at (a look, a cat in the guest, costs some
# 40 ms).
LOOK_EVERY_S = 0.1


def run_pair(ctx, server, client, port=18515, timeout=120, server_vm="vm2", client_vm="vm1",
             address=None, ready=None, server_grace=60):
    """Runs `server` (argv) in server_vm and, once it is ready (by default:
    listens on TCP `port`), `client` (argv) in client_vm with one more
    argument appended: `address`, or server_vm's name. The server gets
    `server_grace` seconds after a client that succeeded to end too.
    Returns (client_result, server_output, server_status)."""
    tag = f"/tmp/pair-{port}"
    cmd = " ".join(shlex.quote(a) for a in server)
    ctx.sh(server_vm, f"rm -f {tag}.out {tag}.rc; (timeout {timeout} {cmd} >{tag}.out 2>&1; "
                      f"echo $? >{tag}.rc) </dev/null >/dev/null 2>&1 &")
    output = lambda: ctx.run(server_vm, ["cat", f"{tag}.out"], check=False).out
    ready = ready or tcp_listening(port)
    deadline = time.monotonic() + 30  # bounded: a server that never gets ready fails
    while not ready(ctx, server_vm, output):
        if time.monotonic() > deadline:
            raise AssertionError(f"{server[0]} was not ready in 30 s:\n{output()}")
        time.sleep(LOOK_EVERY_S)
    result = ctx.run(client_vm, ["timeout", str(timeout), *client, address or server_vm],
                     timeout=timeout + 30, check=False)
    # A client that failed usually leaves its server waiting for it.
    waited = server_grace if result.exitcode == 0 else min(server_grace, 15)
    deadline = time.monotonic() + waited
    while True:
        rc = ctx.run(server_vm, ["cat", f"{tag}.rc"], check=False).out.strip()
        if rc:
            break
        if time.monotonic() > deadline:
            # Where the server waits, for the failure's report: the devices'
            # QPs (PSNs, timers: before the kill destroys them), and each of
            # the server's threads' state and kernel stack.
            devices = device_states(ctx, (client_vm, server_vm))
            name = shlex.quote(server[0])
            stuck = devices + ctx.sh(server_vm, f"for p in $(pgrep -f {name}); do for t in /proc/$p/task/*; do "
                                      f"echo \"== $t $(grep State: $t/status)\"; cat $t/stack; done; done; "
                                      f"pkill -f {name}; true", check=False).out
            return result, output() + f"\n--- the server {waited} s after the client ended ---\n{stuck}", \
                "timeout"
        time.sleep(LOOK_EVERY_S)
    return result, output(), rc
