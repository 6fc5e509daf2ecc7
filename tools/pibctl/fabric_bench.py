"""The fabric benchmark (tests/bench/fabric_bench.cc): two device cores in
two processes, cabled through real pib-fabric-switch processes, no guest.
./pib bench --fabric prints it beside the in-process figures of
core-bench; ./pib test runs it briefly under the sanitizers, for the
bytes it checks."""

import re
import subprocess

from pibctl import paths, ui

OPERATIONS = ("RDMA WRITE", "SEND", "RDMA READ")
SIZES = (8, 64, 512, 4096, 16384, 65536, 262144, 1 << 20)
# ./pib test's run: every row once, a fixed number of messages each.
CHECK_MESSAGES = 64
TIMEOUT = 600  # seconds; the whole table takes about 30 s on 2 cores

_ROW = re.compile(r"^(RDMA WRITE|SEND|RDMA READ)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+\|")
# core-bench's row: its first figures are both devices on one thread.
_CORE_ROW = re.compile(r"^(RDMA WRITE|SEND|RDMA READ)\s+(\d+)\s+\|\s+(\d+)\s+([\d.]+)")


def _binary(build_dir=None):
    """fabric-bench in `build_dir`, by default setup's (./pib bench's)."""
    return (build_dir or paths.core_build_dir()) / "tests" / "bench" / "fabric-bench"


# What ./pib bench --fabric and ./pib test run: (switch processes, cable).
LAYOUTS = ((1, "stream"), (1, "ring"), (2, "ring"))


def describe(switches: int, cable: str) -> str:
    return f"{switches} switch process{'es' if switches > 1 else ''}, {cable} cables"


# The switch's data plane against more pairs of devices: N pairs stream
# RDMA WRITEs of PAIRS_SIZE at once through one switch process, on its
# event loop alone and with SWITCH_THREADS forwarding threads, then each
# pair through a switch process of its own.
PAIRS = (1, 2, 4, 8)
PAIRS_SIZE = 65536
SWITCH_THREADS = 2


def run(switches: int, cable: str, extra=(), build_dir=None) -> str:
    """fabric-bench's table through `switches` (1 or 2) switch processes,
    the devices cabled by `cable` ("stream" or "ring", docs/wire.md)."""
    binary = _binary(build_dir)
    if not binary.is_file():  # the host lane's build failed, or built another tree
        raise ui.StepFailed(f"fabric-bench is not built: {binary}")
    cmd = [str(binary), "--switch", str(paths.fabric_switch_binary()),
           "--switches", str(switches), "--cable", cable, *extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ui.StepFailed(f"fabric-bench through {describe(switches, cable)} ran over "
                            f"{TIMEOUT} s")
    if proc.returncode != 0:
        raise ui.StepFailed(f"fabric-bench through {describe(switches, cable)} failed "
                            f"(exit {proc.returncode}):\n{proc.stderr[-2000:]}{proc.stdout[-2000:]}")
    return proc.stdout


# The three ways pairs_table runs them: fabric-bench's options and a name.
_PAIR_LAYOUTS = ((("--layout", "shared"), "one switch"),
                 (("--layout", "shared", "--switch-threads", str(SWITCH_THREADS)),
                  f"+{SWITCH_THREADS} threads"),
                 (("--layout", "separate"), "a switch each"))


def pairs_table(build_dir=None, runs: int = 3) -> str:
    """Aggregate GB/s of N pairs (PAIRS) streaming RDMA WRITEs of
    PAIRS_SIZE at once through one switch process (its event loop alone,
    then with SWITCH_THREADS forwarding threads), beside N switch
    processes a pair, on ring cables; and the ratios, measured in the
    same run. With two cores, 2N device processes and the switches share
    them: the ratios say what one switch process costs the pairs against
    as many independent ones, and what its threads win back."""
    lines = [f"N pairs streaming RDMA WRITE of {PAIRS_SIZE // 1024} KiB at once, ring cables, "
             f"the median of {runs} runs (GB/s, the pairs' sum; switch CPU s per GB)",
             f"{'pairs':>5} " + " ".join(f"{name:>14} {'CPU':>5}" for _, name in _PAIR_LAYOUTS)
             + f" {'one/each':>9} {'threads/one':>12}"]
    for n in PAIRS:
        figures = []
        for options, _ in _PAIR_LAYOUTS:
            table = run(1, "ring", ["--pairs", str(n), *options, "--runs", str(runs),
                                    "--only", "write", str(PAIRS_SIZE)], build_dir)
            m = next((_ROW.match(line) for line in table.splitlines() if _ROW.match(line)), None)
            if not m:
                raise ui.StepFailed(f"fabric-bench --pairs {n} {' '.join(options)} printed no "
                                    f"row:\n{table}")
            figures.append((float(m.group(4)), float(_switch_cpu(table))))
        (one, _), (threaded, _), (each, _) = figures
        lines.append(f"{n:>5} " + " ".join(f"{gbs:>14.2f} {cpu:>5.2f}" for gbs, cpu in figures)
                     + f" {one / each:>9.2f} {threaded / one:>12.2f}")
    return "\n".join(lines)


def _switch_cpu(table: str) -> str:
    """The switch CPU seconds per GB of a table's first row."""
    for line in table.splitlines():
        if _ROW.match(line):
            return line.split("|")[1].split()[2]
    return "0"


def check_pairs(build_dir) -> None:
    """Two pairs at once through one switch (with and without forwarding
    threads), and through a switch each: every row's bytes compared at
    both ends of each pair."""
    for options, _ in _PAIR_LAYOUTS:
        table = run(1, "ring", ["--pairs", "2", *options, "--runs", "1", "--messages",
                                str(CHECK_MESSAGES), "--only", "write", str(PAIRS_SIZE)],
                    build_dir)
        if ("RDMA WRITE", PAIRS_SIZE) not in rows(table):
            raise ui.StepFailed(f"fabric-bench --pairs 2 {' '.join(options)} printed no row:\n"
                                f"{table}")


def rows(table: str, pattern=_ROW) -> dict:
    """{(operation, bytes): messages/s} of a table."""
    found = {}
    for line in table.splitlines():
        m = pattern.match(line)
        if m:
            found[(m.group(1), int(m.group(2)))] = float(m.group(3))
    return found


def in_process(core_table: str) -> dict:
    """{(operation, bytes): messages/s} of core-bench, both devices on one
    thread."""
    return rows(core_table, _CORE_ROW)


def check(switches: int, cable: str, build_dir) -> None:
    """Every row once with CHECK_MESSAGES messages, by the fabric-bench of
    `build_dir`: it compares the bytes at both ends of each run, and fails
    if they differ."""
    table = run(switches, cable, ["--runs", "1", "--messages", str(CHECK_MESSAGES)], build_dir)
    missing = [f"{op} {size}" for op in OPERATIONS for size in SIZES
               if (op, size) not in rows(table)]
    if missing:
        raise ui.StepFailed(f"fabric-bench printed no row for {', '.join(missing)}:\n{table}")


def with_share(table: str, core: dict) -> str:
    """The table with each row's share of the in-process figure (of
    messages/s, which is that of GB/s at the same size)."""
    out = []
    for line in table.splitlines():
        m = _ROW.match(line)
        if line.startswith("operation"):
            line += "  % in-process"
        elif m and core.get((m.group(1), int(m.group(2)))):
            line += f"  {100 * float(m.group(3)) / core[(m.group(1), int(m.group(2)))]:11.1f}%"
        out.append(line)
    return "\n".join(out)
