"""The gate after each end-to-end test module: what the guests' kernels
and QEMU logged while the module ran must be clean.

- Each guest's kernel log (dmesg, never cleared) and serial console: no
  Oops, BUG, WARNING:, general protection fault, soft lockup, hung task,
  refcount_t or Call Trace, and no error or warning line of our driver.
- Each VM's qemu.log, and those of the QEMUs it moved from: no
  guest-error token (`pib-hca hca0: TOKEN: ...`) the module did not
  mark with guest_errors_expected (tests that provoke errors on purpose
  say which), and none of the trace events the gate was given (./pib
  run gives pib_hca_fatal).

Only what was logged since the last check counts, so a hit is the
module's own. A module may name kernel lines it causes on purpose in
kernel_log_expected (substrings). A substring that names a whole warning
("------------[ cut here ]" to its "---[ end trace") allows that warning,
Call Trace included: for known bugs of a guest kernel that a test trips
over, which the module names with the kernel and the reason."""

import re

from pibctl import fabric, ui

TROUBLE = re.compile(r"Oops|\bBUG\b|WARNING:|general protection|soft lockup|hung task|"
                     r"refcount_t|Call Trace")
# Our driver's messages: "pib 0000:01:00.0: ..." or "pib: ...".
DRIVER = re.compile(r"\] pib[ :]")
DRIVER_LEVELS = ("emerg", "alert", "crit", "err", "warn")
# Said by the kernel about every out-of-tree module, ours included.
ALWAYS_EXPECTED = ("loading out-of-tree module taints kernel",
                   "module verification failed")
GUEST_ERROR = re.compile(r"pib-hca \S+: ([a-z0-9][a-z0-9-]*): ")


class LogGate:
    def __init__(self, fab: fabric.Fabric, trace_events=()):
        """`trace_events`: QEMU trace events that count as trouble when
        qemu.log shows them (the caller enables them)."""
        self.fabric = fab
        self.trace_events = re.compile(
            r"\b(" + "|".join(map(re.escape, trace_events)) + r") ") if trace_events else None
        self.kernel_lines = {}   # vm -> lines of `dmesg -x` already seen
        self.console_bytes = {}  # vm -> bytes of the console log already seen
        self.qemu_bytes = {}     # inode -> bytes of a QEMU log already seen
        self.unreadable = ""     # why the last kernel log could not be read

    def _kernel_log(self, vm):
        """The guest's kernel log; None when it cannot be read (a gate
        that cannot look must not pass)."""
        try:
            return fabric.exec_in(vm.name, ["dmesg", "-x"], timeout=30).out.splitlines()
        except ui.StepFailed as e:
            self.unreadable = str(e)
            return None

    def _new_text(self, path, seen, key):
        try:
            data = path.read_bytes()
        except OSError:
            return ""
        if key is None:  # the file's own: a log renamed keeps its offset
            try:
                key = path.stat().st_ino
            except OSError:
                return ""
        start = seen.get(key, 0)
        if start > len(data):  # the file started again
            start = 0
        seen[key] = len(data)
        return data[start:].decode(errors="replace")

    @staticmethod
    def _drop_expected_warnings(lines, allowed):
        """`lines` without the warning blocks that an allowed substring
        names (each from its "cut here" line to its "end trace" line)."""
        out, block = [], None
        for line in lines:
            if block is None and "[ cut here ]" in line:
                block = [line]
                continue
            if block is not None:
                block.append(line)
                if "---[ end trace" in line:
                    if not any(a in b for b in block for a in allowed):
                        out.extend(block)
                    block = None
                continue
            out.append(line)
        return out + (block or [])

    def check(self, expected_kernel=(), expected_tokens=()):
        """Returns the problems logged since the last check (the first
        time: since boot), as text lines, and prints them."""
        problems = []
        allowed = tuple(expected_kernel) + ALWAYS_EXPECTED
        for vm in self.fabric.vms:
            lines = self._kernel_log(vm)
            if lines is None:
                problems.append(f"{vm.name} kernel: the log could not be read: {self.unreadable}")
                continue
            seen = self.kernel_lines.get(vm.name, 0)
            new = lines[seen:] if seen <= len(lines) else lines  # fewer: it booted again
            self.kernel_lines[vm.name] = len(lines)
            new = self._drop_expected_warnings(new, allowed)
            for line in new:
                if any(a in line for a in allowed):
                    continue
                level = line.split(":", 2)[1].strip() if line.count(":") >= 2 else ""
                if TROUBLE.search(line) or (DRIVER.search(line) and level in DRIVER_LEVELS):
                    problems.append(f"{vm.name} kernel: {line}")
            console = self._new_text(vm.console_log, self.console_bytes, vm.name)
            for line in self._drop_expected_warnings(console.splitlines(), allowed):
                if TROUBLE.search(line) and not any(a in line for a in allowed):
                    problems.append(f"{vm.name} console: {line}")
            # Each QEMU's log, known by its inode: a move renames the old
            # one's (which never goes while the fabric runs).
            qemu = "".join(self._new_text(path, self.qemu_bytes, None) for path in vm.qemu_logs)
            for line in qemu.splitlines():
                m = GUEST_ERROR.search(line)
                traced = self.trace_events and self.trace_events.search(line)
                if (m and m.group(1) not in expected_tokens) or traced:
                    problems.append(f"{vm.name} qemu.log: {line}")
        if problems:
            print("---- logged while the module ran ----\n" + "\n".join(problems[:40]))
        return problems
