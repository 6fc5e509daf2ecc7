"""Console output: step headers, progress of long commands, failures."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from pibctl import paths


class StepFailed(Exception):
    """A setup or fabric step failed; the message says what and where."""


def info(msg: str) -> None:
    print(msg, flush=True)


# When each phase and each step began, for ./pib test's table of where
# the time went: (name, start, is a phase, the machine's CPU time then).
_starts = []


def cpu_jiffies() -> tuple:
    """The machine's CPU time so far, in clock ticks of all its CPUs: (busy
    at normal priority, busy at low priority, in all). Niced processes
    count as low: ./pib test's host lane runs niced (test_lanes.py), so a
    phase's table line can say how much of the machine its own lane took
    and how much the host lane had left."""
    try:
        first = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        user, nice, system, idle, iowait, irq, softirq = (int(v) for v in first[1:8])
    except (OSError, ValueError):
        return (0, 0, 0)
    return (user + system + irq + softirq, nice, user + nice + system + idle + iowait + irq + softirq)


def phase(name: str) -> None:
    """A part of a run that the timing table adds up (steps go inside)."""
    _starts.append((name, time.monotonic(), True, cpu_jiffies()))


def step(msg: str) -> None:
    """A step of the current phase; one a helper thread takes beside the
    main thread's is shown with the thread's name and left out of the
    timing table (its time overlaps the main thread's steps)."""
    thread = threading.current_thread()
    if thread is not threading.main_thread():
        print(f"==> [{thread.name}] {msg}", flush=True)
        return
    _starts.append((msg, time.monotonic(), False, None))
    print(f"==> {msg}", flush=True)


def steps_taken() -> int:
    """How many phases and steps have begun: end_steps_since()'s mark."""
    return len(_starts)


def end_steps_since(mark: int) -> None:
    """Ends a step begun since `mark` now, rather than when the next one
    begins: a step a test takes ends with the test, and the tests after it
    are not counted as its time."""
    if len(_starts) > mark and _starts[-1][0] is not None:
        _starts.append((None, time.monotonic(), False, None))


def cores_used(before: tuple, after: tuple) -> tuple:
    """(CPUs busy at normal priority, at low priority) on average between
    two cpu_jiffies() samples; (0, 0) when none passed."""
    total = after[2] - before[2]
    if total <= 0:
        return (0.0, 0.0)
    cpus = os.cpu_count() or 1
    return tuple(round(cpus * (after[i] - before[i]) / total, 2) for i in (0, 1))


def phase_durations() -> list:
    """(phase, seconds, [(step, seconds)...], (CPUs busy, CPUs busy at low
    priority)) for every phase so far: each phase and step lasted until the
    next began (or it was ended), the last until now."""
    now, cpu_now = time.monotonic(), cpu_jiffies()
    phases = []
    for i, (name, start, is_phase, cpu) in enumerate(_starts):
        end = _starts[i + 1][1] if i + 1 < len(_starts) else now
        if is_phase:
            phases.append([name, start, [], cpu])
        elif phases and name is not None:
            phases[-1][2].append((name, end - start))
    ends = [(p[1], p[3]) for p in phases[1:]] + [(now, cpu_now)]
    return [(name, end - start, steps, cores_used(cpu, cpu_end))
            for (name, start, steps, cpu), (end, cpu_end) in zip(phases, ends)]


def detail(msg: str) -> None:
    print(f"    {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"pib: warning: {msg}", file=sys.stderr, flush=True)


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(text[-lines:])


class _Progress:
    """Shows that a long command is alive: the newest output line, every
    few seconds (rewritten in place on a terminal, one line each 20 s
    otherwise)."""

    def __init__(self, label: str):
        self.label = label
        self.last_line = ""
        self.start = time.monotonic()
        self.tty = sys.stdout.isatty()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self.tty:
            sys.stdout.write("\r\033[K")
            sys.stdout.flush()

    def _run(self):
        period = 1.0 if self.tty else 20.0
        while not self._stop.wait(period):
            elapsed = int(time.monotonic() - self.start)
            line = self.last_line.strip()[:100]
            if self.tty:
                width = os.get_terminal_size().columns if sys.stdout.isatty() else 120
                text = f"    [{elapsed:4d}s] {line}"[: width - 1]
                sys.stdout.write("\r\033[K" + text)
            else:
                sys.stdout.write(f"    [{elapsed:4d}s] {line}\n")
            sys.stdout.flush()


def run_logged(cmd, log_name: str, label: str = "", cwd=None, env=None, input_text=None) -> None:
    """Runs cmd with its output in logs/<log_name>.log, showing progress.
    Raises StepFailed with the log's tail when it fails."""
    log = paths.logs_dir() / f"{log_name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    with open(log, "a") as out, _Progress(label or log_name) as progress:
        out.write(f"\n$ {' '.join(map(str, cmd))}\n")
        out.flush()
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            cwd=cwd,
            env=full_env,
            stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
        )
        if input_text is not None:
            proc.stdin.write(input_text)
            proc.stdin.close()
        for line in proc.stdout:
            out.write(line)
            progress.last_line = line
        rc = proc.wait()
    if rc != 0:
        raise StepFailed(
            f"{' '.join(map(str, cmd[:3]))}... exited with {rc}; log: {log}\n"
            f"--- last lines of {log.name} ---\n{_tail(log, 40)}"
        )


def run_quiet(cmd, cwd=None, check=True) -> str:
    """Runs a short command and returns its stdout."""
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, text=True, capture_output=True, errors="replace"
    )
    if check and proc.returncode != 0:
        raise StepFailed(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout
