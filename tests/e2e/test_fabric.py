"""The fabric launcher: names, management network, the exec channel."""

import re
import subprocess
import time
from pathlib import Path

PIB = Path(__file__).resolve().parents[2] / "pib"


def test_guests_know_their_names_and_reach_each_other(ctx):
    for vm in ctx.vms:
        assert ctx.run(vm, ["hostname"]).out.strip() == vm
    for vm in ctx.vms:
        for peer in ctx.vms:
            if peer != vm:
                ctx.run(vm, ["ping", "-c", "2", "-i", "0.2", "-W", "5", peer], timeout=30)


def test_exec_returns_stdout_stderr_and_status(ctx):
    proc = ctx.pib("exec", "vm1", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert proc.returncode == 3, proc
    assert proc.stdout == "out\n", proc
    assert proc.stderr == "err\n", proc


def test_exec_passes_stdin_and_enforces_timeout(ctx):
    proc = ctx.pib("exec", "--stdin", "vm1", "--", "wc", "-c", stdin="12345")
    assert proc.stdout.strip() == "5", proc
    proc = ctx.pib("exec", "--timeout", "2", "vm1", "--", "sleep", "30")
    assert proc.returncode == 124, proc


def test_exec_runs_beside_a_long_command_in_the_same_guest(ctx):
    """./pib exec holds the guest agent only per request: while one exec
    runs for seconds, another to the same guest answers within a second,
    as a second ssh session would (issue 29: mpirun in the foreground
    made every other exec wait and time out)."""
    # The long one lasts until told to end (bounded), after the short ones.
    ctx.sh("vm1", "rm -f /tmp/exec-go")
    long = subprocess.Popen([str(PIB), "exec", "vm1", "--", "sh", "-c",
                             "for i in $(seq 300); do [ -e /tmp/exec-go ] && break; sleep 0.1; "
                             "done; echo long"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1)  # the long one has started
        assert long.poll() is None, "the long command ended early"
        took = []
        for _ in range(3):
            start = time.monotonic()
            proc = ctx.pib("exec", "vm1", "--", "echo", "short")
            took.append(time.monotonic() - start)
            assert proc.returncode == 0 and proc.stdout == "short\n", proc
        print("./pib exec beside a running one: " + ", ".join(f"{t:.2f} s" for t in took))
        assert long.poll() is None, "the long command ended before the short ones"
        # Waiting for the long one would take 30 s; ./pib itself starts in some 0.3 s.
        assert min(took) < 1.0 and max(took) < 2.5, f"execs beside a running one took {took}"
        ctx.sh("vm1", "touch /tmp/exec-go")
        out, err = long.communicate(timeout=60)
        assert long.returncode == 0 and out == "long\n", (long.returncode, out, err)
    finally:
        if long.poll() is None:
            long.kill()
            long.wait()


def test_exec_of_unknown_vm_fails_clearly(ctx):
    proc = ctx.pib("exec", "vm99", "--", "true")
    assert proc.returncode == 1
    assert "no VM named vm99" in proc.stderr, proc.stderr


def test_status_lists_every_vm(ctx):
    proc = ctx.pib("fabric", "status", "--queues")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for vm in ctx.vms:
        assert f"{vm} " in proc.stdout and "agent answering" in proc.stdout, proc.stdout
    # Every cabled switch port answers with its queues (idle: nothing held back).
    queues = re.findall(r"queues of port (\d+): queued (\d+)", proc.stdout)
    assert len(queues) >= len(ctx.vms), proc.stdout
    assert "blocked" not in proc.stdout and "stalled" not in proc.stdout, proc.stdout



def test_console_reaches_the_guest_shell(ctx):
    proc = ctx.pib("console", "vm1", stdin="echo console-$((6*7))\n", timeout=60)
    assert proc.returncode == 0, proc
    assert "console-42" in proc.stdout, proc.stdout[-2000:]
