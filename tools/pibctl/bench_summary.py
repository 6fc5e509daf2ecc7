"""The one table ./pib bench ends with: the figures that say how fast the
path between two devices is, native, through the fabric and between
guests, each with the ratio its goal is stated in (issue 32), measured in
this one run on this machine, under the git revision they belong to."""

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pibctl import fabric_bench, paths

_MEMCPY = re.compile(r"memcpy on this machine \(one thread\): ([\d.]+) GB/s")
# core-bench's row: one thread (messages/s, GB/s, % memcpy), then a thread
# per device (the same).
_CORE_ROW = re.compile(r"^(RDMA WRITE|SEND|RDMA READ)\s+(\d+)\s+\|\s+(\d+)\s+([\d.]+)\s+[\d.]+%"
                       r"\s+\|\s+(\d+)\s+([\d.]+)")
KIB64 = 65536


@dataclass
class Row:
    what: str
    value: str  # the figure, with its unit
    ratio: str = ""  # what the goal is stated in
    goal: str = ""
    met: str = ""  # "yes", "no", or "" when the row has no goal


def revision(outputs=()) -> str:
    """The checkout's commit, with "+ uncommitted changes" when its files
    differ from it, apart from `outputs` (the files the caller writes its
    results to: a benchmark's second row is not of a changed checkout)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(paths.REPO), *args], capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    others = [f":(exclude){Path(o).relative_to(paths.REPO)}" for o in outputs]
    changed = git("status", "--porcelain", "--", ".", *others)
    return commit + (" + uncommitted changes" if changed else "")


def core_figures(table: str) -> dict:
    """core-bench's figures: memcpy GB/s, and per (operation, bytes) the
    messages/s and GB/s on one thread and on a thread per device."""
    found = {}
    m = _MEMCPY.search(table)
    if m:
        found["memcpy"] = float(m.group(1))
    for line in table.splitlines():
        m = _CORE_ROW.match(line)
        if m:
            key = (m.group(1), int(m.group(2)))
            found[key] = {"one": (float(m.group(3)), float(m.group(4))),
                          "threads": (float(m.group(5)), float(m.group(6)))}
    return found


def fabric_figure(table: str, op: str, size: int):
    """(messages/s, GB/s) of one fabric-bench row, or None."""
    rate = fabric_bench.rows(table).get((op, size))
    return (rate, rate * size / 1e9) if rate else None


def _verdict(ok) -> str:
    return "" if ok is None else "yes" if ok else "no"


def native_rows(core: dict) -> list:
    rows = []
    memcpy = core.get("memcpy")
    if memcpy:
        rows.append(Row("memcpy, one thread", f"{memcpy:.2f} GB/s"))
    write64 = core.get(("RDMA WRITE", KIB64))
    if write64 and memcpy:
        share = 100 * write64["one"][1] / memcpy
        rows.append(Row("native RC WRITE 64 KiB, one thread", f"{write64['one'][1]:.2f} GB/s",
                        f"{share:.1f}% of memcpy", ">= 40%", _verdict(share >= 40)))
    write8 = core.get(("RDMA WRITE", 8))
    if write8:
        one, threads = write8["one"][0], write8["threads"][0]
        rows.append(Row("native RC WRITE 8 B, one thread", f"{one / 1e6:.2f} M msg/s", "",
                        ">= 2 M msg/s", _verdict(one >= 2e6)))
        rows.append(Row("native RC WRITE 8 B, a thread per device", f"{threads / 1e6:.2f} M msg/s",
                        f"{threads / one:.2f}x one thread", ">= 1x", _verdict(threads >= one)))
    return rows


def fabric_rows(tables: dict, core: dict) -> list:
    """`tables`: fabric-bench's table per (switches, cable)."""
    rows = []
    in_process = core.get(("RDMA WRITE", KIB64), {}).get("one")
    for (switches, cable), table in tables.items():
        figure = fabric_figure(table, "RDMA WRITE", KIB64)
        if not figure:
            continue
        share = 100 * figure[0] / in_process[0] if in_process else None
        goal = switches == 1 and cable == "ring"
        rows.append(Row(f"fabric RC WRITE 64 KiB, {fabric_bench.describe(switches, cable)}",
                        f"{figure[1]:.2f} GB/s",
                        f"{share:.1f}% of in-process" if share is not None else "",
                        ">= 50%" if goal else "",
                        _verdict(share >= 50) if goal and share is not None else ""))
    return rows


def guest_rows(by_cable: dict, accel: str) -> list:
    """`by_cable`: {"ring"|"stream": {"bw": MiB/s or None, "lat": us or None}}
    of ib_write_bw at 64 KiB and ib_write_lat at 8 B between two guests."""
    rows = []
    ring, stream = by_cable.get("ring", {}), by_cable.get("stream", {})
    for cable, figures in (("ring", ring), ("stream", stream)):
        bw = figures.get("bw")
        if bw is None:
            continue
        ratio = goal = met = ""
        if cable == "ring" and stream.get("bw"):
            times = bw / stream["bw"]
            ratio, goal, met = f"{times:.1f}x stream cables", ">= 5x", _verdict(times >= 5)
        rows.append(Row(f"{accel.upper()} guests ib_write_bw 64 KiB, {cable} cables",
                        f"{bw:.0f} MiB/s", ratio, goal, met))
    for cable, figures in (("ring", ring), ("stream", stream)):
        lat = figures.get("lat")
        if lat is None:
            continue
        goal = cable == "ring"
        rows.append(Row(f"{accel.upper()} guests ib_write_lat 8 B, {cable} cables",
                        f"{lat:.1f} us", "", "<= 100 us" if goal else "",
                        _verdict(lat <= 100) if goal else ""))
    return rows


def render(rows: list, note: str = "") -> str:
    head = ("figure", "measured", "ratio", "goal", "met")
    cells = [head] + [(r.what, r.value, r.ratio, r.goal, r.met) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = [f"pib-hca benchmark summary, revision {revision()}; every ratio from this run"]
    for c in cells:
        lines.append("  ".join(text.ljust(widths[i]) for i, text in enumerate(c)).rstrip())
    if note:
        lines.append(note)
    return "\n".join(lines)
