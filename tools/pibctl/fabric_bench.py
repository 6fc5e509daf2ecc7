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
