"""./pib run: one command for a CI job. It brings a fabric up (restored
from its snapshot when there is one), runs a command in a guest (and
others beside it in other guests), shows their output as it comes,
keeps every guest's kernel log and every QEMU's log, takes the fabric
down, and exits with the command's status.

A run whose command passed still fails when the guests' kernels or the
devices logged trouble while it ran (log_gate.py: a kernel warning, an
Oops, a guest error or FATAL of a device), unless --ignore-logs."""

import shlex
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from pibctl import fabric, paths, qga, qmp, ui
from pibctl.log_gate import LogGate

# Exit statuses of ./pib run's own (the command's are passed through).
FABRIC_FAILED = 125  # the fabric did not come up: the command never ran
LOGS_FAILED = 1  # the command passed, but the logs show trouble
OUTPUT_DIR = "/run/pib-run"  # in the guest: each command's output
POLL_S = (0.1, 0.25)  # first and longest pause between looks at the commands
FATAL_EVENT = "pib_hca_fatal"  # events.list: the device stops until reset
# How long the --also commands may run on once COMMAND has ended (--grace);
# then they are stopped (SIGTERM), and count as failed.
ALSO_GRACE_S = 30


@dataclass
class GuestCommand:
    vm: str
    argv: list
    label: str  # how the output and the report name it
    pid: int = 0
    output: Path = None  # the host's copy of what it wrote
    tail: qga.GuestFile = None
    result: qga.Result = None
    partial: bytes = b""  # a line it has not ended yet
    seconds: float = 0.0

    @property
    def status(self) -> int:
        """The command's exit status as a shell gives it (128 + signal)."""
        if self.result is None:
            return FABRIC_FAILED
        return 128 + self.result.signal if self.result.signal else self.result.exitcode


@dataclass
class Outcome:
    commands: list = field(default_factory=list)
    log_problems: list = field(default_factory=list)
    fabric_error: str = ""
    logs: Path = None


def _guest_output(command: GuestCommand) -> str:
    return f"{OUTPUT_DIR}/{command.label}.out"


def _guest_argv(command: GuestCommand, workdir: str, timeout: float) -> list:
    """The command as the guest agent runs it: in `workdir`, its output
    (stdout and stderr, as a terminal interleaves them) to a file the
    host reads as it grows, killed after `timeout` seconds."""
    out = _guest_output(command)
    script = (f'cd {shlex.quote(workdir)} || exit 125; export HOME=/root; '
              f'exec timeout -k 10 {int(timeout)} "$@" >> {out} 2>&1')
    return ["/bin/sh", "-c", script, "pib-run", *command.argv]


def _start(fab: fabric.Fabric, command: GuestCommand, workdir: str, timeout: float) -> None:
    vm = fab.vm(command.vm)
    out = _guest_output(command)
    made = fabric.exec_in(vm.name, ["sh", "-c", f"mkdir -p {OUTPUT_DIR} && : > {out}"], timeout=30)
    if made.exitcode != 0:
        raise ui.StepFailed(f"{vm.name}: cannot make {out}: {made.err.strip()}")
    command.tail = qga.GuestFile(vm.qga_sock, out)
    command.pid = qga.start(vm.qga_sock, _guest_argv(command, workdir, timeout))


def _show(command: GuestCommand, data: bytes, prefixed: bool) -> None:
    """Writes what a command said to our stdout (each line led by the
    command's label when several run) and to its file in the logs."""
    with open(command.output, "ab") as f:
        f.write(data)
    if not prefixed:
        sys.stdout.buffer.write(data)
    else:
        data = command.partial + data
        *lines, command.partial = data.split(b"\n")
        for line in lines:
            sys.stdout.buffer.write(command.label.encode() + b"| " + line + b"\n")
    sys.stdout.flush()


def _follow(fab: fabric.Fabric, commands: list, timeout: float, grace: float) -> None:
    """Shows the commands' output until every one has ended: the first,
    COMMAND, and the others once they end or are stopped `grace` seconds
    after it."""
    prefixed = len(commands) > 1
    started = time.monotonic()
    deadline = started + timeout + 60  # timeout -k in the guest ends them first
    delay, longest = POLL_S
    running = list(commands)
    stop_at = None
    while running:
        if stop_at is None and commands[0] not in running:
            stop_at = time.monotonic() + grace
        if stop_at is not None and time.monotonic() > stop_at:
            for command in running:
                _stop(command, grace)
            stop_at = deadline  # stopped once
        for command in list(running):
            vm = fab.vm(command.vm)
            result = qga.status(vm.qga_sock, command.pid)
            data = command.tail.read()  # after the status: an ended command said all
            if data:
                _show(command, data, prefixed)
            if result is not None:
                while data:
                    data = command.tail.read()
                    _show(command, data, prefixed)
                if command.partial:
                    _show(command, b"\n", prefixed)
                command.tail.close()
                command.result = result
                command.seconds = time.monotonic() - started
                running.remove(command)
        if running and time.monotonic() > deadline:
            raise ui.StepFailed(f"{', '.join(c.label for c in running)} still running "
                                f"{timeout:.0f} s after it started; its guest does not answer")
        time.sleep(delay)
        delay = min(delay * 1.5, longest)


def _stop(command: GuestCommand, grace: float) -> None:
    """Sends SIGTERM to a command still running: timeout(1), which the
    agent started, passes it on to the command, then ends by it too (status 143)."""
    ui.warn(f"{command.label}: {shlex.join(command.argv)} still runs {grace:.0f} s after the "
            "main command ended; stopping it (SIGTERM)")
    fabric.exec_in(command.vm, ["kill", "-TERM", str(command.pid)], timeout=30)


def _watch_fatal(fab: fabric.Fabric) -> None:
    """Has each QEMU log the device's FATAL (a trace event, which the log
    gate then finds in qemu.log): the driver may reset the function
    before the run ends, and its kernel log may not say so."""
    for vm in fab.vms:
        try:
            qmp.command(vm.path / "qmp.sock", "trace-event-set-state", name=FATAL_EVENT,
                        enable=True, timeout=30)
        except qmp.QmpError as e:
            raise ui.StepFailed(f"{vm.name}: cannot trace {FATAL_EVENT}: {e}") from e


def _keep_logs(fab: fabric.Fabric, logs: Path) -> None:
    """Each guest's kernel log, console and QEMU logs, and each switch's
    log, into `logs`."""
    for vm in fab.vms:
        try:
            dmesg = fabric.exec_in(vm.name, ["dmesg", "-x"], timeout=30).out
        except ui.StepFailed as e:
            dmesg = f"(could not read the kernel log: {e})\n"
        (logs / f"{vm.name}.dmesg").write_text(dmesg)
        _copy(vm.console_log, logs / f"{vm.name}.console.log")
        for path in vm.qemu_logs:
            _copy(path, logs / f"{vm.name}.{path.name}")
    for name in fab.ib_switch_pids:
        _copy(fab.switch_log(name), logs / f"{name}.log")


def _keep_left_logs(logs: Path) -> None:
    """What a fabric that did not come up left in the run directory: its
    guests' consoles, its QEMUs' logs and stderr, its switches' logs."""
    run = paths.run_dir()
    for path in sorted([*run.glob("**/*.log"), *run.glob("**/qemu.stderr")]):
        _copy(path, logs / "-".join(path.relative_to(run).parts))


def _copy(src: Path, dest: Path) -> None:
    try:
        shutil.copyfile(src, dest)
    except OSError:
        pass  # a log that was never written


def run(up_args: dict, commands: list, logs: Path, timeout: float = 3600,
        ignore_logs: bool = False, grace: float = ALSO_GRACE_S) -> Outcome:
    """Brings a fabric up with `up_args` (fabric.up's), runs `commands`
    (GuestCommand, all at once) in its guests, keeps the logs in `logs`,
    and takes the fabric down."""
    outcome = Outcome(commands=commands, logs=logs)
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    for command in commands:
        command.output = logs / f"{command.label}.out"
        command.output.touch()
    try:
        fab = fabric.up(**up_args)
    except ui.StepFailed as e:
        outcome.fabric_error = str(e)
        _keep_left_logs(logs)
        return outcome
    try:
        _watch_fatal(fab)
        gate = LogGate(fab, trace_events=(FATAL_EVENT,))
        outcome.log_problems += gate.check()  # the boot's, or the restore's
        workdir = fab.share or "/root"
        ui.step(f"Running {' and '.join(f'{c.label}: {shlex.join(c.argv)}' for c in commands)}")
        for command in commands:
            _start(fab, command, workdir, timeout)
        _follow(fab, commands, timeout, grace)
        if not ignore_logs:
            outcome.log_problems += gate.check()
        else:
            outcome.log_problems = []
    except (ui.StepFailed, qga.AgentError) as e:
        outcome.fabric_error = str(e)
    finally:
        _keep_logs(fab, logs)
        fabric.down(quiet=True)
    return outcome


def exit_status(outcome: Outcome) -> int:
    """The first failed command's status; else LOGS_FAILED if the logs
    show trouble; else 0."""
    if outcome.fabric_error:
        return FABRIC_FAILED
    failed = [c.status for c in outcome.commands if c.status != 0]
    if failed:
        return failed[0]
    return LOGS_FAILED if outcome.log_problems else 0


def summary(outcome: Outcome) -> str:
    lines = []
    if outcome.fabric_error:
        lines.append(f"pib run: FAILED: {outcome.fabric_error}")
    for c in outcome.commands:
        if c.result is not None:
            how = f"killed by signal {c.result.signal}" if c.result.signal else \
                f"exited {c.result.exitcode}"
            lines.append(f"pib run: {c.label} ({shlex.join(c.argv)}) {how} after {c.seconds:.1f} s")
    for problem in outcome.log_problems[:20]:
        lines.append(f"pib run: logged while it ran: {problem}")
    status = exit_status(outcome)
    if outcome.log_problems and not any(c.status for c in outcome.commands):
        lines.append("pib run: FAILED: the command passed, but the logs above show trouble "
                     "(--ignore-logs to accept them)")
    lines.append(f"pib run: logs in {outcome.logs}; exit status {status}")
    return "\n".join(lines)


def write_junit(outcome: Outcome, path: Path) -> None:
    """A JUnit report: a test case per command and one for the logs."""
    suite = ET.Element("testsuite", name="pib run")
    cases = []
    for c in outcome.commands:
        case = ET.SubElement(suite, "testcase", classname="pib.run", name=f"{c.label}: "
                             f"{shlex.join(c.argv)}", time=f"{c.seconds:.3f}")
        if c.status != 0:
            failure = ET.SubElement(case, "failure", message=f"exit status {c.status}")
            failure.text = _last_lines(c.output, 50)
        cases.append(case)
    logs = ET.SubElement(suite, "testcase", classname="pib.run",
                         name="guest kernel logs, consoles and qemu.log clean")
    if outcome.fabric_error:
        ET.SubElement(logs, "error", message="the fabric failed").text = outcome.fabric_error
    elif outcome.log_problems:
        ET.SubElement(logs, "failure", message=f"{len(outcome.log_problems)} problems").text = \
            "\n".join(outcome.log_problems)
    cases.append(logs)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", str(sum(1 for c in cases if c.find("error") is not None)))
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def _last_lines(path: Path, count: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-count:])
    except OSError:
        return ""
