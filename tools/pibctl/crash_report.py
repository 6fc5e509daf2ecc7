"""A crashed QEMU's backtrace for the failure report.

QEMU runs in its guest's directory with core dumps allowed and guest RAM
left out of them (-machine dump-guest-core=off), so a core stays small.
When QEMU dies by a signal, gdb reads the core once, the report gets every
thread's stack, and the core is deleted. A host whose core_pattern pipes
cores elsewhere (systemd-coredump, apport) leaves no file: the report says
so instead of a backtrace."""

import resource
import shutil
import subprocess
from pathlib import Path

GDB_TIMEOUT = 120  # seconds: gdb loads QEMU's symbols, then walks every thread
REPORT_CHARS = 12000  # of gdb's output in a report, its end kept
# A line of `bt full` can print a whole structure (CI's gdb printed ld.so's
# _rtld_global, 10 KB on one line, and the cut lost every frame line).
LINE_CHARS = 300
# A report's words for a crash whose core the kernel did not write although
# core_pattern and the limits allow one (some sandboxes write none).
NO_CORE_WRITTEN = "the kernel wrote none"


def allow_core_dumps() -> None:
    """Raises this process's soft core limit to the hard one, for the
    processes it starts next; a host that forbids it keeps its limit."""
    try:
        _, hard = resource.getrlimit(resource.RLIMIT_CORE)
        resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))
    except (ValueError, OSError):
        pass


def _is_core(path: Path) -> bool:
    """An ELF file of type ET_CORE, whatever core_pattern named it."""
    try:
        with open(path, "rb") as f:
            header = f.read(18)
    except OSError:
        return False
    return len(header) == 18 and header[:4] == b"\x7fELF" and header[16] == 4


def _core_file(directory: Path, pid: int):
    """The core `pid` left in `directory`: core, core.PID, or any name
    core_pattern made (%e.%p.core and the like): the ELF core files there,
    one naming `pid` first."""
    files = sorted((p for p in directory.iterdir() if p.is_file() and not p.is_symlink()),
                   key=lambda p: (str(pid) not in p.name, not p.name.startswith("core"), p.name))
    return next((p for p in files if _is_core(p)), None)


def _where_cores_go() -> str:
    try:
        return Path("/proc/sys/kernel/core_pattern").read_text().strip()
    except OSError:
        return "(unreadable)"


def core_settings() -> str:
    """What decides whether a crash leaves a core, for a report that has
    none: core_pattern and this process's core-size limits."""
    soft, hard = (str(n) if n != resource.RLIM_INFINITY else "unlimited"
                  for n in resource.getrlimit(resource.RLIMIT_CORE))
    return f"core_pattern {_where_cores_go()!r}, core-size limits {soft} (soft), {hard} (hard)"


def why_no_core_here() -> str:
    """Why a process we start could leave no core in its own directory
    (a pipe or another directory in core_pattern, a hard limit of 0), or ""
    when it will leave one."""
    pattern = _where_cores_go()
    if pattern.startswith("|"):
        return f"core_pattern is {pattern!r}: cores go to that program"
    if "/" in pattern:
        return f"core_pattern is {pattern!r}: cores go to that directory"
    if resource.getrlimit(resource.RLIMIT_CORE)[1] == 0:
        return "the hard core-size limit is 0: the kernel writes no core"
    return ""


def backtrace(directory: Path, pid: int, binary: str, killed: bool) -> str:
    """Every thread's stack from the core `pid` left in `directory`, or why
    there is none for a process `killed` by a signal (else ""). The core is
    removed once read."""
    core = _core_file(directory, pid)
    if core is None:
        if not killed:
            return ""
        why = why_no_core_here() or f"{NO_CORE_WRITTEN} ({core_settings()})"
        return f"(no core file in {directory}: {why})"
    if shutil.which("gdb") is None:
        return f"(core in {core}; gdb is not installed to read it)"
    # The crashed thread comes last, so that a cut keeps it.
    cmd = ["gdb", "-batch", "-nx", "-ex", "set pagination off", "-ex", "thread apply all bt 20",
           "-ex", "echo \\n--- the thread that crashed ---\\n", "-ex", "bt full 10",
           binary, str(core)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                             timeout=GDB_TIMEOUT).stdout
    except subprocess.TimeoutExpired:
        return f"(gdb did not finish reading {core} in {GDB_TIMEOUT} s; the core is kept)"
    core.unlink(missing_ok=True)
    return _shortened(out)[-REPORT_CHARS:]


def _shortened(gdb_output: str) -> str:
    """gdb's output with each line cut to LINE_CHARS, saying how much went,
    so that the frame lines survive the report's cut."""
    return "\n".join(line if len(line) <= LINE_CHARS
                     else f"{line[:LINE_CHARS]}… ({len(line) - LINE_CHARS} characters cut)"
                     for line in gdb_output.splitlines())
