"""./pib test's second lane: end-to-end passes on a fabric of their own,
beside the first lane's.

A fabric's guests spend much of a test waiting (on each other, on the
subnet manager, on timers): one fabric leaves about half of a 2-core
machine idle, yet two starve each other's QEMUs there, so a second lane
runs only on hosts of more CPUs (testing.LANES_MIN_CPUS). It is a child
`./pib test` with a run
directory of its own (its fabric's sockets, pids and logs): the two
fabrics share nothing but the cache's images and builds, which neither
writes. Its output goes to a log that is printed whole when it ends, so
that each lane reads as one story; its counts and timings join the run's.
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


def run_dir(lane: int) -> Path:
    """The run directory of lane `lane`'s fabrics."""
    return paths.cache_dir() / ("test-run" if lane == 1 else f"test-run-{lane}")


def results_file(lane: int) -> Path:
    return paths.cache_dir() / f"test-lane-{lane}.json"


def write_results(lane: int, counts, phases) -> None:
    """What a child lane hands its parent: its counts, every check's time
    and its phase table."""
    results_file(lane).write_text(json.dumps({
        "passed": counts.passed, "failed": counts.failed, "failures": counts.failures,
        "seconds": counts.seconds, "phases": phases}))


class SecondLane:
    """A child ./pib test running the end-to-end passes `passes` on a run
    directory of its own, started at once."""

    LANE = 2

    def __init__(self, passes, pattern: str, vms: int, accel: str, soaks: bool):
        self.passes = passes
        self.log = paths.cache_dir() / f"test-lane-{self.LANE}.log"
        results_file(self.LANE).unlink(missing_ok=True)
        argv = [str(paths.REPO / "pib"), "test", "--e2e-only", "--lanes", "1",
                "--pass", ",".join(passes), "--lane", str(self.LANE),
                "--vms", str(vms), "--accel", accel]
        if pattern:
            argv += ["-k", pattern]
        if soaks:
            argv.append("--soak")
        ui.step(f"A second lane: the passes {', '.join(passes)} on a fabric of their own, "
                f"beside this one's (its log: {self.log})")
        self.started = time.monotonic()
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                         env=dict(os.environ, PYTHONUNBUFFERED="1"))

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
                # Killed, it left its fabric up: take it down from here.
                subprocess.run([str(paths.REPO / "pib"), "fabric", "down"], check=False,
                               env=dict(os.environ, PIB_RUN_DIR=str(run_dir(self.LANE))))

    def finish(self, counts) -> list:
        """Waits for the lane (bounded), prints its log, adds its results to
        `counts`, and returns its phase table."""
        left = LANE_TIMEOUT_S - (time.monotonic() - self.started)
        try:
            self.proc.wait(timeout=max(1, left))
        except subprocess.TimeoutExpired:
            self.stop()
            counts.record(f"the second lane ({', '.join(self.passes)}) ends in "
                          f"{LANE_TIMEOUT_S // 60} min", False, time.monotonic() - self.started)
        ui.info(f"\n======== the second lane ({', '.join(self.passes)}), which ran beside "
                f"the passes above; its log: ========")
        ui.info(self.log.read_text(errors="replace").rstrip())
        ui.info("======== end of the second lane ========\n")
        results = results_file(self.LANE)
        if not results.is_file():
            counts.record(f"the second lane ({', '.join(self.passes)}) reports its results",
                          False, 0, f"it exited with status {self.proc.returncode} and wrote "
                                    f"no {results}")
            return []
        data = json.loads(results.read_text())
        counts.passed += data["passed"]
        counts.failed += data["failed"]
        counts.failures += [f"{f} [second lane]" for f in data["failures"]]
        counts.seconds += [(s, n) for s, n in data["seconds"]]
        return data["phases"]
