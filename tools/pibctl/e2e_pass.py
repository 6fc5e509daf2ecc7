"""One end-to-end pass: which tests it runs, the fabric they share, and
the checks made around them. tests/e2e/conftest.py runs this under
pytest; ./pib test (testing.py) runs one pytest session per pass.

- Before the first test: the fabric boots (or is restored from its
  snapshot) with every port ACTIVE and clean kernel logs, its guests are
  unique, its cables are the kind asked for, and ibqueryerrors finds no
  port with errors.
- After each module's last test: the log gate (log_gate.py) and
  ibqueryerrors, each a check of its own.
- After the last test: every QEMU and switch the fabric started still
  runs, and fabric down leaves none of them behind.

These checks are recorded by `record` (./pib test counts them with the
tests); one that fails also raises CheckFailed, so that pytest reports it
as an error of the test it ran after."""

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pibctl import driver_build, fabric, paths, snapshot, sources, topology, ui
from pibctl.log_gate import LogGate
from pibctl.own_kernel import OwnKernel

E2E_DIR = paths.REPO / "tests" / "e2e"
TWO_SWITCHES = E2E_DIR / "two-switches.topo"
HOSTILE = E2E_DIR / "hostile.topo"
CONNECTX = E2E_DIR / "connectx.topo"
SIMULATED = E2E_DIR / "simulated.topo"

TEST_CPUS = 2  # vCPUs of every test guest
# Every test guest has 4 GiB, one of them reserved at boot as a 1 GiB huge
# page (test_protection maps an MR on it; a running guest seldom finds 1
# GiB of contiguous free memory to make one). Below 4 GiB, q35 gives a
# guest 2 GiB, which the kernel and its initramfs break up; the early
# boot allocates downwards from the top of RAM: with 2 GiB above 4 GiB,
# [4 GiB, 5 GiB) stays whole for the page. Memory a guest does not touch
# costs the host nothing.
TEST_MEMORY_MIB = 4096
TEST_KERNEL_ARGS = "hugepagesz=1G hugepages=1"

# The trace events every test fabric's QEMUs write to their qemu.log: the
# rare ones a failed transfer is explained by (its ACK timeouts and how
# they were counted, and what a move or the switch's discards made the
# QPs resend), shown with the log's tail when a test fails.
TEST_TRACE = ("pib_hca_rc_timeout*,pib_hca_rc_retry_exceeded,pib_hca_rc_*_after_loss,"
              "pib_hca_link_discards_told")
# More of them, from ./pib test --trace; in the environment, so that the
# other lanes' processes have them too.
MORE_TRACE = "PIB_TEST_TRACE"


@dataclass(frozen=True)
class Pass:
    """An end-to-end pass: the fabric it boots, and the modules it runs
    (their markers, tests/e2e/pytest.ini)."""
    name: str
    two_switches: bool = False  # tests/e2e/two-switches.topo, stream cables
    topology_file: Path = None  # only the modules marked topology(its name)
    own_kernel: bool = False  # guests booted as a user boots a kernel of theirs
    vms: int = 0  # guests on one switch (0: as ./pib test --vms says)

    def selects(self, item) -> bool:
        """Whether test `item` runs in this pass. A module marked
        topology(FILE) runs only on the fabric of that file, own_kernel
        only in the own-kernel pass, only_two_switches only on two
        switches; also_two_switches runs there too."""
        marked = item.get_closest_marker
        topology_name = marked("topology").args[0] if marked("topology") else None
        also = marked("also_two_switches") is not None
        if self.own_kernel or marked("own_kernel"):
            return self.own_kernel and marked("own_kernel") is not None
        if self.topology_file or topology_name:
            if self.topology_file:
                return topology_name == self.topology_file.name
            return self.two_switches and also
        return self.two_switches == (marked("only_two_switches") is not None) or also

    @property
    def suffix(self) -> str:
        """What follows a test's name in ./pib test's lines."""
        if self.topology_file:
            return f"[{self.topology_file.stem}]"
        return "[2 switches]" if self.two_switches else "[own kernel]" if self.own_kernel else ""

    @property
    def cable(self) -> str:
        """How the pass's HCAs reach their switches: the two-switch pass
        keeps the byte stream (what TCP between hosts carries), the others
        use ring cables, so that the tests run on both kinds."""
        return "stream" if self.two_switches else "ring"

    def fabric(self, vms: int):
        """(guests, topology or None for `vms` VMs on one switch, and the
        fabric's description)."""
        topo_file = self.topology_file or (TWO_SWITCHES if self.two_switches else None)
        topo = topology.parse(topo_file.read_text(), str(topo_file)) if topo_file else None
        vms = len(topo.guests) if topo else (self.vms or vms)
        where = f"{vms} VMs and " + (f"{len(topo.switches)} switches" if topo else "1 switch")
        if self.own_kernel:
            where += ", booted with --kernel and --modules"
        return vms, topo, f"{where}, {self.cable} cables"


# The passes, in the order one lane runs them.
PASSES = {p.name: p for p in (
    Pass("main"),
    Pass("two-switches", two_switches=True),
    Pass("hostile", topology_file=HOSTILE),
    Pass("connectx", topology_file=CONNECTX),
    Pass("own-kernel", own_kernel=True, vms=2),
    Pass("simulated", topology_file=SIMULATED),
)}


class CheckFailed(Exception):
    """A check of the pass failed; it is already recorded."""


class Context:
    """What an end-to-end test gets (its `ctx` fixture): the fabric and
    helpers to use it."""

    def __init__(self, fab: fabric.Fabric):
        self.fabric = fab

    @property
    def vms(self):
        return [vm.name for vm in self.fabric.vms]

    def run(self, vm: str, argv, timeout: float = 120, check: bool = True, stdin: bytes = None):
        result = fabric.exec_in(vm, argv, timeout=timeout, stdin=stdin)
        if check and result.exitcode != 0:
            raise AssertionError(
                f"{vm}: {' '.join(argv)} exited {result.exitcode}\n"
                f"stdout:\n{result.out}\nstderr:\n{result.err}"
            )
        return result

    def sh(self, vm: str, script: str, timeout: float = 120, check: bool = True):
        return self.run(vm, ["bash", "-c", script], timeout=timeout, check=check)

    def pib(self, *args, timeout: float = 300, stdin: str = None):
        """Runs this checkout's ./pib with the test's environment."""
        return subprocess.run(
            [str(paths.REPO / "pib"), *args], capture_output=True, text=True,
            timeout=timeout, errors="replace", input=stdin,
        )

    def restart_sm(self) -> None:
        fabric.restart_sm(self.fabric)

    def host_log(self, vm: str) -> str:
        path = self.fabric.vm(vm).qemu_log
        return path.read_text(errors="replace") if path.exists() else ""


def print_check(name: str, ok: bool, seconds: float, why: str = "") -> None:
    """`record` outside ./pib test: the check's line."""
    ui.info(f"{'PASS' if ok else 'FAIL'}  {name}  ({seconds:.1f} s)" + (f": {why}" if why else ""))


class PassRun:
    """A pass's fabric and its checks, for the pytest session that runs
    the pass. `record(name, ok, seconds, why)` counts a check; `booted()`
    is called once the fabric's boot has ended, however it ended."""

    def __init__(self, which: Pass, vms: int = 2, accel: str = "tcg", record=print_check,
                 booted=None):
        self.which = which
        self.accel = accel
        self.record = record
        self.booted = booted
        self.vms, self.topo, self.where = which.fabric(vms)
        self.fab = None
        self.gate = None
        self.stall_offsets = {}  # how far each switch log was read for stalls
        self.fabric_lost = False  # check_still_runs found it gone (said once)

    def selected(self, tests: int) -> None:
        """Says what the pass will do once its tests are chosen."""
        if tests:
            ui.phase(f"end-to-end: {tests} tests on {self.where}")
        else:
            ui.info(f"no end-to-end tests selected for {self.where}")

    def up(self, tests: int) -> bool:
        """Boots the fabric and makes its first checks; False if it did
        not boot (then it is down again)."""
        booting = ui.steps_taken()
        ui.step(f"End-to-end tests ({tests}) on a fabric of {self.where}")
        start = time.monotonic()
        try:
            self.fab = self._boot()
        except ui.StepFailed as e:
            print(e)
            self.record(f"fabric of {self.where} boots, all ports ACTIVE", False,
                        time.monotonic() - start, str(e))
            if not isinstance(e, fabric.AlreadyUp):  # another run's, left alone
                fabric.down(quiet=True)
            return False
        finally:
            if self.booted:
                self.booted()
        self.gate = LogGate(self.fab)
        problems = self.gate.check()
        came = "is restored from its snapshot" if self.fab.restored_from else "boots"
        self.record(f"fabric of {self.where} {came}, all ports ACTIVE, kernel logs clean",
                    not problems, time.monotonic() - start, str(problems[0]) if problems else "")
        if self.fab.restored_from:
            self._timed(f"the guests of {self.where} restored from the fabric's snapshot "
                        "reseeded their random numbers, took ssh keys of their own, have GIDs "
                        "of their own", lambda: "\n".join(snapshot.not_unique(self.fab)))
        self._timed(f"every HCA port of the fabric of {self.where} is on a {self.which.cable} "
                    "cable", lambda: "\n".join(cables_not_as_asked(self.fab)))
        self._timed(f"ibqueryerrors finds no port with errors on the fresh fabric of "
                    f"{self.where}", lambda: fresh_fabric_errors(self.fab))
        ui.end_steps_since(booting)  # the table shows the boot; the rest of the phase is tests
        _stalls_since(self.fab, self.stall_offsets)  # what the boot logged is not a module's
        return True

    def _boot(self):
        # Guests have two vCPUs, so that the driver's code and the concurrent
        # tests (several pib-traffic threads and processes, the create/destroy
        # churn) really run on two at once.
        own = bundled_kernel_as_users() if self.which.own_kernel else None
        trace = ",".join(filter(None, [TEST_TRACE, os.environ.get(MORE_TRACE, "")]))
        return fabric.up(vms=self.vms, accel=self.accel, topology=self.topo, cpus=TEST_CPUS,
                         memory=TEST_MEMORY_MIB, kernel_args=TEST_KERNEL_ARGS, own=own,
                         cable=self.which.cable, trace=trace)

    def check_still_runs(self, test: str) -> None:
        """Raises CheckFailed, once, if the fabric's state or any of its
        processes went during `test`: with how each QEMU ended and who took
        the fabric down, if anybody did."""
        if self.fabric_lost:
            return
        gone = fabric.stopped_processes(self.fab)
        state = Path(self.fab.run_dir) / fabric.STATE_FILE
        if not gone and state.is_file():
            return
        self.fabric_lost = True
        why = [f"gone: {', '.join(gone) or 'none of its processes'}; "
               f"{state} {'is there' if state.is_file() else 'is gone'}"]
        last = fabric.last_down()
        if last:
            why.append(f"the last fabric down in {self.fab.run_dir}: {last}")
        why += [fabric.ended_report(vm) for vm in self.fab.vms if vm.name in gone]
        report = "\n".join(why)
        print(report)
        self.record(f"the fabric of {self.where} still runs after {test}", False, 0, why[0])
        raise CheckFailed(f"the fabric went during {test}: {why[0]}")

    def _timed(self, name: str, problems) -> bool:
        """Records the check `name`: it passes if `problems()` says nothing."""
        start = time.monotonic()
        why = problems()
        self.record(name, not why, time.monotonic() - start, why)
        return not why

    def check_module(self, module, last_of_pass: bool = False) -> None:
        """The checks after a module's last test: the log gate, then
        ibqueryerrors, which then clears every port's error counters so
        that the next module is judged on its own. `module` is pytest's
        node of it: its markers say what it does on purpose. The pass's
        last module, when it makes errors on purpose, has nothing to be
        judged and nobody after it to clear the counters for: ibqueryerrors
        is not run (on a simulated fabric it takes 20 s)."""
        stem = Path(str(module.path)).stem
        suffix = self.which.suffix
        expected = module.get_closest_marker("kernel_log_expected")
        guest_errors = module.get_closest_marker("guest_errors_expected")
        start = time.monotonic()
        problems = self.gate.check(expected.args if expected else (),
                                   guest_errors.args if guest_errors else ())
        name = f"{stem}: guest kernel logs, consoles and qemu.log clean{suffix}"
        self.record(name, not problems, time.monotonic() - start,
                    str(problems[0]) if problems else "")
        on_purpose = module.get_closest_marker("errors_on_purpose")
        if on_purpose and last_of_pass:
            print(f"{stem}: port errors not read (made on purpose: {on_purpose.args[0]}); "
                  "the pass ends with it")
            errors_ok = True
        else:
            errors_ok = self._check_port_errors(stem, on_purpose.args[0] if on_purpose else "")
        if problems or not errors_ok:
            raise CheckFailed(f"{stem}: the checks after its last test failed (see above)")

    def _check_port_errors(self, stem: str, why: str) -> bool:
        """ibqueryerrors after a module's last test. A module whose tests
        make errors on purpose (faults, outages, driver reloads: a link
        that goes down counts in LinkDowned as on hardware) is marked
        errors_on_purpose(why) and is not judged."""
        start = time.monotonic()
        stalled = _stalls_since(self.fab, self.stall_offsets)
        errors = fabric_errors(self.fab, clear=True)
        if why:
            if errors:
                print(f"{stem}: port errors expected ({why}):\n{errors}")
            return True
        # IBA's head-of-queue lifetime: a switch output whose peer took
        # nothing for it (a QEMU that the host did not run for ~270 ms, under
        # TCG on a loaded machine) discards what is sent to it until it drains.
        # Discards on exactly the ports the switches logged so are shown, not
        # failed; anything else fails.
        if errors and _explained(errors, lambda node, port, counters: (
                (node, port) in stalled and _DISCARDS_ONLY.fullmatch(counters))):
            print(f"{stem}: PortXmitDiscards where a switch output stalled (its peer took "
                  f"nothing for its head-of-queue lifetime):\n{errors}{_stall_lines(self.fab)}")
            errors = ""
        elif errors:
            errors += _stall_lines(self.fab)
        self.record(f"{stem}: ibqueryerrors finds no port with errors after its "
                    f"tests{self.which.suffix}", not errors, time.monotonic() - start, errors)
        return not errors

    def failure_report(self) -> str:
        """What the fabric shows when a test fails: each guest's RC timer
        events, the switches' and consoles' last lines, each qemu.log's."""
        if not self.fab:
            return ""
        lines = [f"---- RC timer events in qemu.log of {vm.name}: {fabric.rc_timer_summary(vm)}"
                 for vm in self.fab.vms]
        for switch in self.fab.ib_switch_pids:
            lines += [f"---- log of {switch} (last lines) ----",
                      fabric.switch_log_tail(self.fab, switch)]
        for vm in self.fab.vms:
            lines += [f"---- console of {vm.name} (last lines) ----", fabric.console_tail(vm, 15),
                      f"---- qemu.log of {vm.name} (last lines) ----", fabric.qemu_log_tail(vm, 15)]
        return "\n".join(lines)

    def down(self) -> None:
        """The last checks, then fabric down."""
        start = time.monotonic()
        gone = fabric.stopped_processes(self.fab)
        if gone:
            print("no longer running before fabric down: " + ", ".join(gone))
            for vm in self.fab.vms:
                if vm.name in gone:
                    print(fabric.ended_report(vm))
        self.record("every QEMU and switch the fabric started still runs", not gone,
                    time.monotonic() - start, ", ".join(gone))
        start = time.monotonic()
        fabric.down(quiet=True)
        left = _leftover_processes(self.fab.run_dir)
        if left:
            print("processes left behind by fabric down:\n  " + "\n  ".join(left))
        self.record("fabric down stops every process it started", not left,
                    time.monotonic() - start)
        if gone or left:
            raise CheckFailed("the fabric's processes: see above")


def bundled_kernel_as_users() -> OwnKernel:
    """The default bundled kernel laid out as a user's own build would be:
    its bzImage, and an INSTALL_MOD_PATH whose lib/modules/RELEASE holds
    its modules and links `build` to its tree (here, its headers)."""
    release, root = sources.fetch_guest_kernel(sources.DEFAULT_KERNEL)
    kdir = driver_build.fetch_headers(release, sources.kernel_suite(sources.DEFAULT_KERNEL))
    install = paths.cache_dir() / "test-own-kernel"
    if install.exists():
        shutil.rmtree(install)
    moddir = install / "lib" / "modules" / release
    moddir.mkdir(parents=True)
    for entry in (root / "lib" / "modules" / release).iterdir():
        if entry.name != "build":
            (moddir / entry.name).symlink_to(entry)
    (moddir / "build").symlink_to(kdir)
    return OwnKernel(kernel=root / "boot" / f"vmlinuz-{release}", modules=install, driver=True)


def cables_not_as_asked(fab) -> list:
    """The ports whose switch log does not show the kind of cable asked
    for: each HCA's a ring cable, or none at all, as the fabric's `cable`
    says; each link between two switches (all on this host) a ring cable
    the dialling switch offered."""
    def ring_in_log(switch, port, offered=False):
        log = fab.switch_log(switch)
        text = log.read_text(errors="replace") if log.exists() else ""
        tail = r"[^\n]* \(offered\)" if offered else ""
        return re.search(rf"port {port}: ring cable of {tail}", text) is not None
    wrong = []
    for vm in fab.vms:
        for switch, port in vm.cables:
            rings = ring_in_log(switch, port)
            if rings != (fab.cable == "ring"):
                wrong.append(f"{vm.name} on {switch} port {port}: "
                             f"{'a ring cable' if rings else 'no ring cable'} in "
                             f"{fab.switch_log(switch)}")
    for link in fab.topo.links:
        if not ring_in_log(link.b, link.b_port, offered=True):
            wrong.append(f"the link {link.a}:{link.a_port} - {link.b}:{link.b_port}: no ring "
                         f"cable offered in {fab.switch_log(link.b)}")
    return wrong


def _leftover_processes(run_dir: str):
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        command_line = fabric.cmdline(int(proc.name)) or ""
        if fabric.names_run_dir(command_line, run_dir):
            left.append(f"{proc.name}: {command_line[:120]}")
    return left


_DISCARDS_ONLY = re.compile(r"\[PortXmitDiscards == \d+\]")
_STALL = re.compile(r"port (\d+): took nothing for")


def _switch_logs(fab):
    """(name, text) of each IB switch's log."""
    for switch in fab.topo.switches:
        log = fab.switch_log(switch.name)
        yield switch.name, log.read_text(errors="replace") if log.is_file() else ""


def _stalls_since(fab, offsets: dict) -> set:
    """(switch, port) of each output a switch logged as stuck since the
    last look (`offsets`: how far each log was read, updated here)."""
    stalled = set()
    for name, text in _switch_logs(fab):
        stalled |= {(name, m[1])
                    for m in _STALL.finditer(text, min(offsets.get(name, 0), len(text)))}
        offsets[name] = len(text)
    return stalled


def _stall_lines(fab) -> str:
    """What the switches logged of outputs they found stuck (their
    head-of-queue lifetime ran out, and packets to them were discarded)
    and of their draining again: the why of PortXmitDiscards."""
    lines = [f"{name}: {line.strip()}" for name, text in _switch_logs(fab)
             for line in text.splitlines() if _STALL.search(line) or "draining again" in line]
    return ("\nswitch logs:\n  " + "\n  ".join(lines[-10:])) if lines else ""


# A port's line in ibqueryerrors' report, and the node it is under.
_ERRORS_NODE = re.compile(r'^Errors for .*"(?P<node>[^"]*)"')
_ERRORS_PORT = re.compile(r"^\s*GUID 0x[0-9a-f]+ port (?P<port>\d+): (?P<errors>.*)$")


def _port_errors(report: str) -> list:
    """(node, port, its counters beyond threshold) of each port line in
    ibqueryerrors' report; the node is its description (a switch's name)."""
    node, found = "", []
    for line in report.splitlines():
        if m := _ERRORS_NODE.match(line.strip()):
            node = m["node"]
        elif m := _ERRORS_PORT.match(line):
            found.append((node, m["port"], m["errors"]))
    return found


def _explained(report: str, why) -> bool:
    """Whether every port ibqueryerrors names is one `why(node, port,
    counters)` explains (and it named some)."""
    ports = _port_errors(report)
    return bool(ports) and all(why(*p) for p in ports)


def fresh_fabric_errors(fab) -> str:
    """fabric_errors() of a fabric just booted. A guest the boot started
    afresh (fabric.booted_again: a TCG hang) took its cable down once, and
    its switch port counts it (LinkDownedCounter == 1), as a power-cycled
    node's would. A fabric saved for the next `fabric up` once it booted
    had its guests paused and run again one after another, and a switch
    discards what a guest that ran again sends to a port whose guest had
    not yet (PortXmitDiscards), as it discards what is sent to any guest
    that moves. In a simulated fabric of thousands of ports, opensm takes
    seconds to set them all ACTIVE, one after another, and the guests'
    first packets (IPoIB's, the SA's answers) meet ports it has made ARMED
    but not yet ACTIVE: a port that is not ACTIVE discards data (IBA 7.2;
    the switch holds 16 packets an ARMED port first), which its switch
    counts in PortXmitDiscards, as hardware does. Those and nothing else
    are explained; they are shown, and the counters are cleared for the
    modules' checks."""
    errors = fabric_errors(fab, clear=True)  # reported, then cleared for the modules
    rebooted = {(switch, str(port)) for vm in fab.vms if vm.name in fab.booted_again
                for switch, port in vm.cables}
    simulated = any(s.simulate for s in fab.topo.switches)
    if not errors or not _explained(errors, lambda node, port, counters: (
            ((node, port) in rebooted and counters == "[LinkDownedCounter == 1]") or
            ((fab.saved_after_boot or simulated) and _DISCARDS_ONLY.fullmatch(counters)))):
        return errors
    print(f"ibqueryerrors: explained ({', '.join(fab.booted_again) or 'no guest'} started afresh; "
          f"the fabric {'was' if fab.saved_after_boot else 'was not'} saved after its boot"
          f"{'; data met ports of the simulated fabric opensm had not yet made ACTIVE' if simulated else ''}"
          f"), cleared:\n{errors}")
    return ""


def fabric_errors(fab, clear: bool = False) -> str:
    """What ibqueryerrors (in vm1, at its default thresholds) reports of
    the fabric's ports, or "" when no port has errors beyond them: a
    freshly booted fabric has none (docs/prm.md §2.1: the driver's first
    reset keeps the power-on link). `clear` then resets every port's error
    counters (ibqueryerrors -k: a PMA Set of PortCounters)."""
    # A simulated fabric's thousand nodes take ibqueryerrors minutes from
    # a TCG guest on a loaded host; a few switches, seconds.
    simulated = any(s.simulate for s in fab.topo.switches)
    result = fabric.exec_in(fab.vms[0].name, ["ibqueryerrors"] + (["-k"] if clear else []),
                            timeout=600 if simulated else 120)
    summary = re.search(r"(\d+) ports? ha(?:ve|s) errors beyond threshold", result.out)
    if result.exitcode == 0 and summary and summary[1] == "0":
        checked = [line.strip("# ").strip() for line in result.out.splitlines() if "checked" in line]
        print("ibqueryerrors: " + "; ".join(checked))
        return ""
    return f"ibqueryerrors exited {result.exitcode}:\n{result.out}{result.err}"
