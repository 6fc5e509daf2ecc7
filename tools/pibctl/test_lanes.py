"""./pib test's other lanes: child `./pib test` runs beside the first
lane's end-to-end passes.

A fabric's guests spend much of a test waiting (on each other, on the
subnet manager, on timers): one fabric leaves about half of a 2-core
machine idle. Two lanes use that time:

- the host lane: the checks that need no guest (unit tests, build
  checks, fuzzers, qtest, packages) at the idle scheduling class
  (SCHED_IDLE), so that they take only the CPU time the guests leave and
  a vCPU that wakes always goes first;
- a second end-to-end lane: passes on a fabric of their own, only on hosts
  of more CPUs (testing.LANES_MIN_CPUS): on 2, two fabrics starve each
  other's QEMUs.

Each is a child `./pib test --lane NAME` with a run directory of its own
(a fabric's sockets, pids and logs): lanes share nothing but the cache's
images and builds, which only the host lane writes (the headers' C
check in setup's build, and the sanitized build, its own). A lane's
output goes to a log that is printed whole when it ends, so that each
lane reads as one story; its counts and timings join the run's.
"""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from pibctl import paths, ui

# A lane that has not ended this long after it began is killed: every test
# in it has its own timeout, so only a hang outside the tests gets here.
LANE_TIMEOUT_S = 90 * 60
FIRST = "1"
HOST = "host"  # the checks that need no guest
SECOND = "2"  # end-to-end passes beside the first lane's


def run_dir(lane: str) -> Path:
    """The run directory of lane `lane`'s fabrics."""
    return paths.cache_dir() / ("test-run" if lane == FIRST else f"test-run-{lane}")


def results_file(lane: str) -> Path:
    return paths.cache_dir() / f"test-lane-{lane}.json"


def log_file(lane: str) -> Path:
    return paths.cache_dir() / f"test-lane-{lane}.log"


def write_results(lane: str, counts, phases) -> None:
    """What a child lane hands its parent: its counts, every check's time
    and its phase table."""
    results_file(lane).write_text(json.dumps({
        "passed": counts.passed, "failed": counts.failed, "failures": counts.failures,
        "seconds": counts.seconds, "phases": phases}))


def _idle_class() -> None:
    """In the child before it runs: the idle scheduling class, which its
    own children inherit, and the lowest nice value. SCHED_IDLE ignores
    nice; the kernel counts a niced process's CPU time apart (/proc/stat's
    "nice"), so the phase table can tell the lane's CPU from the guests'."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    os.nice(19)


class Lane:
    """A child ./pib test of lane `name` running `what`, started at once."""

    def __init__(self, name: str, what: str, args, idle: bool = False):
        self.name, self.what = name, what
        self.log = log_file(name)
        results_file(name).unlink(missing_ok=True)
        argv = [str(paths.REPO / "pib"), "test", "--lane", name, *args]
        ui.step(f"The {what} in a lane of their own, beside this one's passes"
                f"{' at idle CPU priority' if idle else ''} (its log: {self.log})")
        self.started = time.monotonic()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"),
                                         preexec_fn=_idle_class if idle else None)

    def stop(self) -> None:
        """The run ends early: the child is interrupted as a user's ^C
        would, so that it takes its fabric down."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                # Killed, it left its fabric (if any) up: take it down from here.
                subprocess.run([str(paths.REPO / "pib"), "fabric", "down"], check=False,
                               capture_output=True,
                               env=dict(os.environ, PIB_RUN_DIR=str(run_dir(self.name))))

    def finish(self, counts) -> list:
        """Waits for the lane (bounded), prints its log, adds its results to
        `counts`, and returns its phase table."""
        left = LANE_TIMEOUT_S - (time.monotonic() - self.started)
        try:
            self.proc.wait(timeout=max(1, left))
        except subprocess.TimeoutExpired:
            self.stop()
            counts.record(f"the lane of the {self.what} ends in {LANE_TIMEOUT_S // 60} min",
                          False, time.monotonic() - self.started)
        ui.info(f"\n======== the lane of the {self.what}, which ran beside the passes "
                f"above; its log: ========")
        ui.info(self.log.read_text(errors="replace").rstrip())
        ui.info(f"======== end of the lane of the {self.what} ========\n")
        results = results_file(self.name)
        if not results.is_file():
            counts.record(f"the lane of the {self.what} reports its results", False, 0,
                          f"it exited with status {self.proc.returncode} and wrote no {results}")
            return []
        data = json.loads(results.read_text())
        counts.passed += data["passed"]
        counts.failed += data["failed"]
        counts.failures += [f"{f} [{self.name} lane]" for f in data["failures"]]
        counts.seconds += [(s, n) for s, n in data["seconds"]]
        return data["phases"]


def host_lane() -> Lane:
    """The checks that need no guest, at the idle scheduling class."""
    return Lane(HOST, "checks that need no guest", ["--unit-only"], idle=True)


def second_lane(passes, chosen, vms: int, accel: str) -> Lane:
    """The end-to-end passes `passes` on a fabric of their own, with the
    tests `chosen` (testing.Selection)."""
    args = ["--e2e-only", "--lanes", "1", "--pass", ",".join(passes),
            "--vms", str(vms), "--accel", accel, *chosen.options()]
    return Lane(SECOND, f"passes {', '.join(passes)}", args)
