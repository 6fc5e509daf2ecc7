"""A run killed before its fabric down leaves the fabric's state behind
(CI once found one in a warm cache and could not boot its own fabric).
These checks make such states in a scratch run directory and see that
fabric up clears one none of whose processes runs, and leaves one with a
running process alone. And a QEMU that crashes leaves its backtrace in the
failure report."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pibctl import crash_report, fabric, ui


def _leftover(run_dir: Path, pid: int) -> fabric.Fabric:
    """The state a killed run leaves: one VM, one IB switch, the
    management switch, all with `pid`."""
    left = fabric.Fabric(run_dir=str(run_dir), accel="tcg", mgmt_switch_pid=pid,
                         ib_switch_pids={"switch1": pid})
    left.vms.append(fabric.Vm(name="vm1", index=1, dir=str(run_dir / "vm1"), pid=pid))
    left.save()
    return left


def _in_run_dir(check) -> None:
    saved = os.environ.get("PIB_RUN_DIR")
    with tempfile.TemporaryDirectory(prefix="pib-stale-") as scratch:
        os.environ["PIB_RUN_DIR"] = scratch
        try:
            check(Path(scratch).resolve())
        finally:
            if saved is None:
                del os.environ["PIB_RUN_DIR"]
            else:
                os.environ["PIB_RUN_DIR"] = saved


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def stale_state_is_cleared() -> None:
    def check(run_dir: Path):
        _leftover(run_dir, _dead_pid())
        if not fabric.clear_stale() or fabric.load() is not None:
            raise ui.StepFailed(f"the state in {run_dir} of a fabric with no process was kept")
    _in_run_dir(check)


def _until_cmdline_shows(pid: int, run_dir: Path) -> None:
    """Popen returns as exec closes the error pipe, which the kernel does
    before it has laid out the new program's arguments: for that moment
    /proc/PID/cmdline reads empty (CI once saw it so)."""
    deadline = time.monotonic() + 10
    while not fabric.ours(pid, str(run_dir)):
        if time.monotonic() > deadline:
            raise ui.StepFailed(f"process {pid} never showed {run_dir} in its command line")
        time.sleep(0.01)


def running_fabric_is_kept() -> None:
    def check(run_dir: Path):
        # A process of this fabric: its command line names a file in the
        # run directory, as a QEMU's names its sockets.
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                 str(run_dir / "vm1" / "qga.sock")])
        try:
            _until_cmdline_shows(proc.pid, run_dir)
            _leftover(run_dir, proc.pid)
            if fabric.clear_stale() or fabric.load() is None:
                raise ui.StepFailed(f"the state in {run_dir} of a running fabric was cleared")
        finally:
            proc.kill()
            proc.wait()
    _in_run_dir(check)


def crash_leaves_a_backtrace() -> None:
    """A guest's QEMU that dies by a signal: the process is started as
    fabric up starts QEMU (its own directory, cores allowed) and killed
    with SIGSEGV; the failure report must carry its stack. A host that
    keeps cores elsewhere, or whose kernel writes none at all (as some
    sandboxes do), cannot give one: the report must then say why, and the
    check says which host it ran on."""
    with tempfile.TemporaryDirectory(prefix="pib-crash-") as scratch:
        vm = fabric.Vm(name="vm1", index=1, dir=scratch, command=["sleep", "60"])
        fabric.start_process(vm)
        os.kill(vm.pid, signal.SIGSEGV)
        report = fabric.ended_report(vm)
    first = report.splitlines()[0] if report else "(empty)"
    if "was killed by SIGSEGV" not in first:
        raise ui.StepFailed(f"the report of a crash does not name the signal ({first}):\n"
                            f"{report[-2000:]}")
    if "#0 " in report:
        return
    why = crash_report.why_no_core_here() or crash_report.NO_CORE_WRITTEN
    if why not in report:
        raise ui.StepFailed(f"no backtrace and no reason for its absence in the report of a "
                            f"crash ({first}):\n{report[-2000:]}")
    ui.info(f"    no backtrace on this host: {why} ({crash_report.core_settings()}); "
            "the report says so")
