"""./pib test: unit tests (meson), then end-to-end tests on one booted
fabric shared by every test. Ends with the line `N passed, N failed`."""

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from pibctl import (checkout_checks, core_build, driver_build, fabric, fabric_bench, fuzzing,
                    mlx5_layouts, package_checks, paths,
                    qemu_build, setup, snapshot, sources, stale_state_checks, test_lanes, topology, ui)
from pibctl.log_gate import LogGate
from pibctl.own_kernel import OwnKernel

E2E_DIR = paths.REPO / "tests" / "e2e"
TEST_TIMEOUT = 600  # seconds a single end-to-end test may take
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


# The lines of a failure's reason printed under its FAIL line (its tail).
DETAIL_LINES = 40


class Counts:
    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.failures = []
        self.seconds = []  # (seconds, name) of every check

    def record(self, name: str, ok: bool, seconds: float, why: str = "") -> None:
        """Counts a result. A failure's `why` (its first line) goes on the
        FAIL line and into the summary, so that a log cut short around
        either still says what failed."""
        self.seconds.append((seconds, name))
        if ok:
            self.passed += 1
            ui.info(f"PASS  {name}  ({seconds:.1f} s)")
            return
        self.failed += 1
        first = _first_line(why)
        self.failures.append(f"{name} ({first})" if first else name)
        ui.info(f"FAIL  {name}  ({seconds:.1f} s)" + (f": {first}" if first else ""))
        # The rest of the reason (a report's logs), so that CI's log has it.
        for line in why.strip().splitlines()[1:][-DETAIL_LINES:]:
            ui.info(f"      {line}")


def _first_line(text: str, limit: int = 200) -> str:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _catch2_counts(stdout: str):
    """(passed, failed) test cases from a Catch2 summary, or None."""
    m = re.search(r"All tests passed \(\d+ assertions? in (\d+) test cases?\)", stdout)
    if m:
        return int(m.group(1)), 0
    m = re.search(r"test cases:\s+(\d+) \|\s+(\d+) passed \|\s+(\d+) failed", stdout)
    if m:
        return int(m.group(2)), int(m.group(3))
    m = re.search(r"test cases:\s+(\d+) \|\s+(\d+) failed", stdout)
    if m:
        return 0, int(m.group(2))
    return None


def run_unit_tests(counts: Counts) -> None:
    """The unit tests under clang's sanitizers (two parts side by side,
    some 25 and 35 s), and the source checks (format, generated files,
    the docs' facts)."""
    core_build.build_tests()
    ui.step("Unit tests (meson test)")
    _meson_test(counts, core_build.sanitized_build_dir(), "unit-asan-ubsan")


def _meson_test(counts: Counts, build: Path, label: str) -> None:
    """`meson test` of every test of `build`, its results counted."""
    log = build / "meson-logs" / "testlog.json"
    log.unlink(missing_ok=True)
    output = subprocess.run(["meson", "test", "-C", build, "--print-errorlogs", "--no-rebuild"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace").stdout
    if not log.is_file():
        print(output)
        counts.record(f"{label}: meson test (no test log written)", False, 0)
        return
    for line in log.read_text().splitlines():
        _count_meson_test(counts, label, json.loads(line))


def _count_meson_test(counts: Counts, label: str, entry: dict) -> None:
    name, ok = entry["name"], entry["result"] == "OK"
    cases = _catch2_counts(entry.get("stdout", ""))
    if cases:
        passed, failed = cases
        if not ok and not failed:
            failed = 1  # crashed before its summary
    else:
        passed, failed = (1, 0) if ok else (0, 1)
    counts.passed += passed
    counts.failed += failed
    if failed:
        counts.failures.append(f"{label}:{name}")
        print(entry.get("stdout", "")[-4000:])
    ui.info(f"{'PASS' if not failed else 'FAIL'}  {label}:{name}  ({passed} passed, {failed} failed)")


class Context:
    """What an end-to-end test gets: the fabric and helpers to use it."""

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


TWO_SWITCHES = E2E_DIR / "two-switches.topo"
HOSTILE = E2E_DIR / "hostile.topo"
CONNECTX = E2E_DIR / "connectx.topo"


def soak(test):
    """Marks an end-to-end test as a soak: one that runs for a minute or
    more to find leaks and stalls. ./pib test runs soaks only with --soak."""
    test.soak = True
    return test


def _load_tests(pattern: str, second_pass: bool = False, topology_file: Path = None,
                own_pass: bool = False, soaks: bool = False):
    """Tests whose name contains `pattern`; in the second pass, on the
    fabric of two switches, only those of modules that ask for it
    (ALSO_ON_TWO_SWITCHES, ONLY_ON_TWO_SWITCHES). A module that names a
    topology file of tests/e2e (ONLY_ON_TOPOLOGY) runs only on a fabric of
    its own, built from that file; one that asks for ONLY_ON_OWN_KERNEL
    only on guests booted the way a user boots a kernel of theirs."""
    # Test modules may share helpers that live beside them.
    if str(E2E_DIR) not in sys.path:
        sys.path.insert(0, str(E2E_DIR))
    tests = []
    for path in sorted(E2E_DIR.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"e2e_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        only_second = getattr(module, "ONLY_ON_TWO_SWITCHES", False)
        only_topology = getattr(module, "ONLY_ON_TOPOLOGY", None)
        if own_pass or getattr(module, "ONLY_ON_OWN_KERNEL", False):
            if not own_pass or not getattr(module, "ONLY_ON_OWN_KERNEL", False):
                continue
        elif topology_file or only_topology:
            also_here = (second_pass and not topology_file
                         and getattr(module, "ALSO_ON_TWO_SWITCHES", False))
            if (not topology_file or only_topology != topology_file.name) and not also_here:
                continue
        elif second_pass != only_second and not getattr(module, "ALSO_ON_TWO_SWITCHES", False):
            continue
        suffix = (f"[{topology_file.stem}]" if topology_file
                  else "[2 switches]" if second_pass else "[own kernel]" if own_pass else "")
        for name in sorted(vars(module)):
            fn = getattr(module, name)
            full = f"{path.stem}::{name}"
            if (name.startswith("test_") and callable(fn) and (not pattern or pattern in full)
                    and (soaks or not getattr(fn, "soak", False))):
                tests.append((full + suffix, fn, module))
    return tests


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout(f"test exceeded {TEST_TIMEOUT} s")


def _leftover_processes(run_dir: str):
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        command_line = fabric.cmdline(int(proc.name)) or ""
        if fabric.names_run_dir(command_line, run_dir):
            left.append(f"{proc.name}: {command_line[:120]}")
    return left


def _check_logs(counts: Counts, gate: LogGate, module, last_test: str) -> None:
    """The log gate after a module's last test (see log_gate.py)."""
    start = time.monotonic()
    stem = last_test.split("::")[0]
    suffix = last_test[last_test.index("["):] if "[" in last_test else ""
    problems = gate.check(getattr(module, "KERNEL_LOG_EXPECTED", ()),
                          getattr(module, "GUEST_ERRORS_EXPECTED", ()))
    counts.record(f"{stem}: guest kernel logs, consoles and qemu.log clean{suffix}",
                  not problems, time.monotonic() - start, str(problems[0]) if problems else "")


def _check_port_errors(counts: Counts, fab, module, last_test: str, stall_offsets: dict) -> None:
    """ibqueryerrors after a module's last test, which then clears every
    port's error counters so that the next module is judged on its own.
    A module whose tests make errors on purpose (faults, outages, driver
    reloads: a link that goes down counts in LinkDowned as on hardware)
    says so in ERRORS_ON_PURPOSE and is not judged."""
    start = time.monotonic()
    stem = last_test.split("::")[0]
    suffix = last_test[last_test.index("["):] if "[" in last_test else ""
    stalled = _stalls_since(fab, stall_offsets)
    errors = fabric_errors(fab, clear=True)
    why = getattr(module, "ERRORS_ON_PURPOSE", "")
    if why:
        if errors:
            print(f"{stem}: port errors expected ({why}):\n{errors}")
        return
    # IBA's head-of-queue lifetime: a switch output whose peer took
    # nothing for it (a QEMU that the host did not run for ~270 ms, under
    # TCG on a loaded machine) discards what is sent to it until it drains.
    # Discards on exactly the ports the switches logged so are shown, not
    # failed; anything else fails.
    if errors and _explained(errors, lambda node, port, counters: (
            (node, port) in stalled and _DISCARDS_ONLY.fullmatch(counters))):
        print(f"{stem}: PortXmitDiscards where a switch output stalled (its peer took nothing for "
              f"its head-of-queue lifetime):\n{errors}{_stall_lines(fab)}")
        errors = ""
    elif errors:
        errors += _stall_lines(fab)
    counts.record(f"{stem}: ibqueryerrors finds no port with errors after its tests{suffix}",
                  not errors, time.monotonic() - start, errors)


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


def _pass_fabric(vms: int, second_pass: bool, topology_file: Path, own_pass: bool):
    """The topology of a pass (None: `vms` VMs on one switch), and its
    description."""
    topo_file = topology_file or (TWO_SWITCHES if second_pass else None)
    topo = topology.parse(topo_file.read_text(), str(topo_file)) if topo_file else None
    if topo:
        vms = len(topo.guests)
    where = f"{vms} VMs and " + (f"{len(topo.switches)} switches" if topo else "1 switch")
    if own_pass:
        where += ", booted with --kernel and --modules"
    return vms, topo, where


def _pass_cable(second_pass: bool) -> str:
    """How the pass's HCAs reach their switches: the two-switch pass keeps
    the byte stream (what TCP between hosts carries), the others use ring
    cables, so that the end-to-end tests run on both kinds."""
    return "stream" if second_pass else "ring"


# The trace events every test fabric's QEMUs write to their qemu.log: the
# rare ones a failed transfer is explained by (its ACK timeouts and how
# they were counted), shown with the log's tail when a test fails.
TEST_TRACE = "pib_hca_rc_timeout*,pib_hca_rc_retry_exceeded"
# More of them, from ./pib test --trace; in the environment, so that the
# other lanes' processes have them too.
MORE_TRACE = "PIB_TEST_TRACE"


def _boot(vms: int, accel: str, topo, own_pass: bool, cable: str = "ring"):
    # Guests have two vCPUs, so that the driver's code and the concurrent
    # tests (several pib-traffic threads and processes, the create/destroy
    # churn) really run on two at once.
    own = bundled_kernel_as_users() if own_pass else None
    return fabric.up(vms=vms, accel=accel, topology=topo, cpus=TEST_CPUS,
                     memory=TEST_MEMORY_MIB, kernel_args=TEST_KERNEL_ARGS, own=own, cable=cable,
                     trace=",".join(filter(None, [TEST_TRACE, os.environ.get(MORE_TRACE, "")])))


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


def run_e2e(counts: Counts, pattern: str, vms: int, accel: str,
            second_pass: bool = False, topology_file: Path = None, own_pass: bool = False,
            soaks: bool = False, booted=None) -> None:
    """Runs the end-to-end tests on one fabric: `vms` VMs on one switch, in
    the second pass the fabric of tests/e2e/two-switches.topo, the fabric
    of `topology_file` for the modules that ask for it, or in the own pass
    guests that boot the bundled kernel the way a user's own is booted.
    `booted` is called once the fabric's boot has ended, however it ended."""
    tests = _load_tests(pattern, second_pass, topology_file, own_pass, soaks)
    vms, topo, where = _pass_fabric(vms, second_pass, topology_file, own_pass)
    cable = _pass_cable(second_pass)
    where += f", {cable} cables"
    if not tests:
        ui.info(f"no end-to-end tests selected for {where}")
        return
    ui.phase(f"end-to-end: {len(tests)} tests on {where}")
    booting = ui.steps_taken()
    ui.step(f"End-to-end tests ({len(tests)}) on a fabric of {where}")
    boot_start = time.monotonic()
    try:
        fab = _boot(vms, accel, topo, own_pass, cable)
    except ui.StepFailed as e:
        print(e)
        counts.record(f"fabric of {where} boots, all ports ACTIVE", False,
                      time.monotonic() - boot_start, str(e))
        fabric.down(quiet=True)
        return
    finally:
        if booted:
            booted()
    gate = LogGate(fab)
    problems = gate.check()
    came = "is restored from its snapshot" if fab.restored_from else "boots"
    counts.record(f"fabric of {where} {came}, all ports ACTIVE, kernel logs clean",
                  not problems, time.monotonic() - boot_start, str(problems[0]) if problems else "")
    if fab.restored_from:
        checked = time.monotonic()
        shared = snapshot.not_unique(fab)
        counts.record(f"the guests of {where} restored from the fabric's snapshot reseeded their "
                      "random numbers, took ssh keys of their own, have GIDs of their own",
                      not shared, time.monotonic() - checked, "\n".join(shared))
    wrong = cables_not_as_asked(fab)
    counts.record(f"every HCA port of the fabric of {where} is on a {cable} cable", not wrong, 0,
                  "\n".join(wrong))
    checked = time.monotonic()
    errors = _fresh_fabric_errors(fab)
    counts.record(f"ibqueryerrors finds no port with errors on the fresh fabric of {where}",
                  not errors, time.monotonic() - checked, errors)
    ui.end_steps_since(booting)  # the table shows the boot; the rest of the phase is tests
    stall_offsets = {}
    _stalls_since(fab, stall_offsets)  # what the boot logged is not a module's
    ctx = Context(fab)
    old = signal.signal(signal.SIGALRM, _alarm)
    try:
        for index, (name, fn, module) in enumerate(tests):
            start = time.monotonic()
            steps = ui.steps_taken()
            signal.alarm(TEST_TIMEOUT)
            why = ""
            try:
                fn(ctx)
                ok = True
            except Exception as e:  # a failing test must not stop the run
                ok = False
                why = f"{type(e).__name__}: {e}"
                print(f"---- {name} failed ----")
                if isinstance(e, (AssertionError, _Timeout, ui.StepFailed)):
                    print(f"{type(e).__name__}: {e}")
                    tb = traceback.extract_tb(e.__traceback__)
                    where = [f for f in tb if f.filename.startswith(str(E2E_DIR))]
                    if where:
                        print(f"  at {Path(where[-1].filename).name}:{where[-1].lineno}")
                else:
                    traceback.print_exc(file=sys.stdout)
                for vm in fab.vms:
                    print(f"---- RC timer events in qemu.log of {vm.name}: "
                          f"{fabric.rc_timer_summary(vm)}")
                for switch in fab.ib_switch_pids:
                    print(f"---- log of {switch} (last lines) ----")
                    print(fabric.switch_log_tail(fab, switch))
                for vm in fab.vms:
                    print(f"---- console of {vm.name} (last lines) ----")
                    print(fabric.console_tail(vm, 15))
                    print(f"---- qemu.log of {vm.name} (last lines) ----")
                    print(fabric.qemu_log_tail(vm, 15))
            finally:
                signal.alarm(0)
                ui.end_steps_since(steps)
            counts.record(name, ok, time.monotonic() - start, why)
            if index + 1 == len(tests) or tests[index + 1][2] is not module:
                _check_logs(counts, gate, module, name)
                _check_port_errors(counts, fab, module, name, stall_offsets)
    finally:
        signal.signal(signal.SIGALRM, old)
        start = time.monotonic()
        gone = fabric.stopped_processes(fab)
        if gone:
            print("no longer running before fabric down: " + ", ".join(gone))
            for vm in fab.vms:
                if vm.name in gone:
                    print(fabric.ended_report(vm))
        counts.record("every QEMU and switch the fabric started still runs", not gone,
                      time.monotonic() - start, ", ".join(gone))
        start = time.monotonic()
        fabric.down(quiet=True)
        left = _leftover_processes(fab.run_dir)
        if left:
            print("processes left behind by fabric down:\n  " + "\n  ".join(left))
        counts.record("fabric down stops every process it started", not left,
                      time.monotonic() - start)


def check_other_kernels(counts: Counts) -> None:
    """The driver must also build, warning-free, against the kernels
    Debian offers that the guests do not run this time."""
    ui.step("The driver against the other kernels")
    for name in driver_build.other_kernels():
        start = time.monotonic()
        try:
            release = driver_build.compile_check(name)
            counts.record(f"the driver builds warning-free against Linux {name} ({release})", True,
                          time.monotonic() - start)
        except ui.StepFailed as e:
            counts.record(f"the driver builds warning-free against Linux {name}", False,
                          time.monotonic() - start, str(e))


def check_mlx5_layouts(counts: Counts) -> None:
    """The ConnectX front end's field constants that say where they live
    sit where Linux's mlx5_ifc.h puts them (mlx5_layouts.py), in the
    headers of every kernel the cache holds; a field an older kernel's
    header lacks must lie in its reserved bits, and some header must have
    every one."""
    ui.step("The ConnectX layouts against mlx5_ifc.h")
    found = mlx5_layouts.headers()
    complete = []  # the headers that name every constant's field
    for header in found:
        start = time.monotonic()
        release = header.relative_to(paths.cache_dir() / "kernel-headers").parts[0]
        try:
            checked, problems, absent = mlx5_layouts.check(header)
        except (ValueError, KeyError) as e:  # a header or constant it cannot read
            checked, problems, absent = 0, [f"{header}: {type(e).__name__}: {e}"], []
        if problems:
            print("\n".join(problems))
        if not absent:
            complete.append(release)
        reserved = f"; {len(absent)} reserved in it ({', '.join(absent)})" if absent else ""
        counts.record(f"{checked} ConnectX field constants ({', '.join(mlx5_layouts.CHECKED)}) "
                      f"match mlx5_ifc.h of Linux {release}{reserved}",
                      checked > 0 and not problems, time.monotonic() - start,
                      problems[0] if problems else "")
    counts.record("some kernel's mlx5_ifc.h names the field of every ConnectX constant",
                  bool(complete), 0, "" if complete else
                  f"no kernel header with mlx5_ifc.h in the cache has them all ({len(found)} read)")


def check_newest_qemu(counts: Counts) -> None:
    """./pib qemu-patches, written against the pinned QEMU, applied to the
    newest QEMU source in Debian's archives: it applies, the tree
    configures with the device, and the glue compiles warning-free against
    that tree's headers; and that check refuses a glue calling a function
    the tree lacks."""
    version = sources.QEMU_NEWEST.version
    if _check(counts, f"the qemu-patches series applies to QEMU {version} and hw/pib compiles "
              "against it", lambda: qemu_build.build_objects(qemu_build.NEWEST)):
        _check(counts, f"that compile check fails for a glue calling a function QEMU {version} "
               "lacks", lambda: qemu_build.check_catches_api_break(qemu_build.NEWEST))
    _check(counts, "the pinned QEMU carries every fix in qemu-hw/qemu-fixes, and QEMU "
           f"{version} needs none of the backports among them",
           lambda: ui.detail(f"qemu-fixes: {qemu_build.check_pinned_fixes()}"))


def check_checkouts(counts: Counts) -> None:
    """Checkouts share the cache (source_tree.py) without rebuilding or
    disturbing each other."""
    ui.step("Checkouts sharing the cache")
    _check(counts, "./pib setup in a second checkout of the same content rebuilds nothing and "
           f"takes under {checkout_checks.SECOND_SETUP_S} s of CPU",
           checkout_checks.same_content_reuses_everything)
    _check(counts, "a checkout of other content builds in a tree of its own, leaving this "
           "checkout's builds alone", checkout_checks.other_content_builds_apart)


def check_fabric_bench(counts: Counts) -> None:
    """The fabric benchmark runs, and the bytes of each run arrive."""
    ui.step("The fabric benchmark (two device processes, switch processes, no guest)")
    for switches, cable in fabric_bench.LAYOUTS:
        _check(counts, "fabric-bench moves RC WRITE, SEND and READ of 8 B to 1 MiB through "
               f"{fabric_bench.describe(switches, cable)}, every byte compared",
               lambda s=switches, c=cable: fabric_bench.check(s, c))


def check_stale_state(counts: Counts) -> None:
    """A fabric's state left by a killed run does not stop the next run."""
    ui.step("A killed run's fabric state")
    _check(counts, "fabric up clears the state of a fabric none of whose processes runs",
           stale_state_checks.stale_state_is_cleared)
    _check(counts, "and leaves the state of a fabric with a running process alone",
           stale_state_checks.running_fabric_is_kept)
    _check(counts, "a QEMU that crashes leaves its backtrace in the failure report",
           stale_state_checks.crash_leaves_a_backtrace)


def check_packages(counts: Counts) -> None:
    """./pib package's packages in a stock Debian root (package_checks.py);
    the provider package in a guest is an end-to-end test."""
    with tempfile.TemporaryDirectory(prefix="pib-packages-") as out:
        debs = {}
        if not _check(counts, "./pib package makes the DKMS package and both provider packages",
                      lambda: debs.update(package_checks.build(Path(out)))):
            return
        _check(counts, "apt installs the DKMS and provider packages into a fresh stock trixie "
               "root, DKMS builds pib.ko for its kernel, the provider resolves against its "
               "rdma-core, a purge removes the module",
               lambda: package_checks.dkms_builds_the_driver_and_the_provider_resolves(debs))
        _check(counts, "the rdma-core 65 provider package resolves against Debian's "
               "libibverbs1 65", lambda: package_checks.rdma_core_65_provider_resolves(debs))


def _check(counts: Counts, name: str, step) -> bool:
    """Records `step()` as a check: it passes unless it raises StepFailed."""
    start = time.monotonic()
    try:
        step()
    except ui.StepFailed as e:
        counts.record(name, False, time.monotonic() - start, str(e))
        return False
    counts.record(name, True, time.monotonic() - start)
    return True


def _print_phases(phases) -> None:
    for name, seconds, steps in phases:
        ui.info(f"  {seconds:7.0f} s  {_first_line(name, 90)}")
        for msg, step_seconds in steps:
            if step_seconds >= 5:
                ui.info(f"  {step_seconds:9.0f} s  {_first_line(msg, 88)}")


def print_timing(counts: Counts, beside=(), slowest: int = 10) -> None:
    """Where the time went: each step (setup's and the tests' phases), and
    the slowest checks; `beside` is (what, phase table) of each lane that
    ran beside this one's passes."""
    ui.info("\ntime per phase (and its steps of 5 s or more):")
    _print_phases(ui.phase_durations())
    for what, phases in beside:
        ui.info(f"beside the end-to-end phases above, in the lane of the {what}:")
        _print_phases(p for p in phases if p[0] != "setup")
    ui.info(f"the {slowest} slowest checks:")
    for seconds, name in sorted(counts.seconds, reverse=True)[:slowest]:
        ui.info(f"  {seconds:7.0f} s  {_first_line(name, 90)}")


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


def _fresh_fabric_errors(fab) -> str:
    """fabric_errors() of a fabric just booted. A guest the boot started
    afresh (fabric.booted_again: a TCG hang) took its cable down once, and
    its switch port counts it (LinkDownedCounter == 1), as a power-cycled
    node's would. A fabric saved for the next `fabric up` once it booted
    had its guests paused and run again one after another, and a switch
    discards what a guest that ran again sends to a port whose guest had
    not yet (PortXmitDiscards), as it discards what is sent to any guest
    that moves. Those and nothing else are explained; they are shown, and
    the counters are cleared for the modules' checks."""
    errors = fabric_errors(fab, clear=True)  # reported, then cleared for the modules
    rebooted = {(switch, str(port)) for vm in fab.vms if vm.name in fab.booted_again
                for switch, port in vm.cables}
    if not errors or not _explained(errors, lambda node, port, counters: (
            ((node, port) in rebooted and counters == "[LinkDownedCounter == 1]") or
            (fab.saved_after_boot and re.fullmatch(r"\[PortXmitDiscards == \d+\]", counters)))):
        return errors
    print(f"ibqueryerrors: explained ({', '.join(fab.booted_again) or 'no guest'} started afresh; "
          f"the fabric {'was' if fab.saved_after_boot else 'was not'} saved after its boot), "
          f"cleared:\n{errors}")
    return ""


def fabric_errors(fab, clear: bool = False) -> str:
    """What ibqueryerrors (in vm1, at its default thresholds) reports of
    the fabric's ports, or "" when no port has errors beyond them: a
    freshly booted fabric has none (docs/prm.md §2.1: the driver's first
    reset keeps the power-on link). `clear` then resets every port's error
    counters (ibqueryerrors -k: a PMA Set of PortCounters)."""
    result = fabric.exec_in(fab.vms[0].name, ["ibqueryerrors"] + (["-k"] if clear else []),
                            timeout=120)
    summary = re.search(r"(\d+) ports? ha(?:ve|s) errors beyond threshold", result.out)
    if result.exitcode == 0 and summary and summary[1] == "0":
        checked = [line.strip("# ").strip() for line in result.out.splitlines() if "checked" in line]
        print("ibqueryerrors: " + "; ".join(checked))
        return ""
    return f"ibqueryerrors exited {result.exitcode}:\n{result.out}{result.err}"


# The end-to-end passes (./pib test --pass), each on a fabric of its own,
# in the order one lane runs them, with what run_e2e needs to know of each.
PASS_FABRICS = {
    "main": {},
    "two-switches": {"second_pass": True},
    "hostile": {"topology_file": HOSTILE},
    "connectx": {"topology_file": CONNECTX},
    "own-kernel": {"own_pass": True, "vms": 2},
}
PASSES = tuple(PASS_FABRICS)
# With two lanes, the second takes these and the first the rest: about
# equal halves of the e2e time (main 405 s, hostile 143 s, own kernel 28 s
# against ConnectX 298 s, two switches 225 s in a run of one lane).
SECOND_LANE = ("connectx", "two-switches")
# Two lanes need this many host CPUs. On two, the guests of two fabrics
# starve each other's QEMUs of the CPU for longer than RC's ACK timeouts:
# ibv_rc_pingpong and the fault tests ended in RETRY_EXC when tried.
LANES_MIN_CPUS = 4


def default_lanes() -> int:
    return 2 if (os.cpu_count() or 1) >= LANES_MIN_CPUS else 1


def run_pass(counts: Counts, name: str, pattern: str, vms: int, accel: str,
             soaks: bool = False, booted=None) -> None:
    """One end-to-end pass of PASSES on its fabric."""
    fabric_args = dict(PASS_FABRICS[name])
    run_e2e(counts, pattern, fabric_args.pop("vms", vms), accel, soaks=soaks, booted=booted,
            **fabric_args)


def _split_lanes(passes, lanes: int):
    """(the passes this process runs, those a second lane runs)."""
    if lanes < 2:
        return list(passes), []
    theirs = [p for p in SECOND_LANE if p in passes]
    return [p for p in passes if p not in theirs], theirs


def run_host_checks(counts: Counts, bench: bool = True) -> None:
    """Every check that needs no guest. `bench`: also the fabric
    benchmark's, whose RC timeouts are real time (the host lane leaves it
    to the first, which runs it at the usual priority)."""
    ui.phase("unit tests and build checks")
    run_unit_tests(counts)
    check_checkouts(counts)
    check_stale_state(counts)
    if bench:
        check_fabric_bench(counts)
    check_other_kernels(counts)
    check_mlx5_layouts(counts)
    check_newest_qemu(counts)
    check_packages(counts)
    ui.phase("fuzzers and qtest")
    fuzzing.build()
    fuzzing.replay(counts)
    fuzzing.qtest(counts, accesses=200_000)


def run(pattern: str = "", unit: bool = True, e2e: bool = True, vms: int = 2,
        accel: str = "tcg", soaks: bool = False, passes=PASSES, lanes: int = 0,
        lane: str = test_lanes.FIRST, trace: str = "") -> int:
    """Every test. With both kinds, the checks that need no guest run in
    the host lane, beside the end-to-end passes (test_lanes.py); `lane`
    other than the first is such a child: its results are written for the
    parent that started it."""
    start = time.monotonic()
    unknown = [p for p in passes if p not in PASSES]
    if unknown:
        raise ui.StepFailed(f"--pass {','.join(unknown)}: each one of {', '.join(PASSES)}")
    lanes = lanes or default_lanes()
    ui.phase("setup")
    if lane == test_lanes.FIRST:
        setup.run()
    # Tests get their own run directory: a fabric the user has up is left alone.
    os.environ["PIB_RUN_DIR"] = str(test_lanes.run_dir(lane))
    if trace:
        os.environ[MORE_TRACE] = trace
    counts = Counts()
    mine, theirs = _split_lanes(passes, lanes) if e2e else ([], [])
    others = []

    def start_host_lane():
        """The host lane begins once the first fabric has booted: a boot is
        all CPU, and work beside it slows it even at the idle priority (the
        caches TCG's translated code lives in are shared): the first
        fabric's took 30 s beside the host lane, 14 to 20 s alone."""
        if unit and e2e and not any(other.name == test_lanes.HOST for other in others):
            others.append(test_lanes.host_lane())

    if unit and not e2e:
        run_host_checks(counts, bench=lane != test_lanes.HOST)
    if e2e:
        if theirs:
            others.append(test_lanes.second_lane(theirs, pattern, vms, accel, soaks))
        try:
            if unit:
                ui.phase("the fabric benchmark")
                check_fabric_bench(counts)
            for name in mine:
                run_pass(counts, name, pattern, vms, accel, soaks=soaks, booted=start_host_lane)
            start_host_lane()  # if no pass of this lane booted a fabric
        except BaseException:
            for other in others:
                other.stop()
            raise
    beside = []
    for other in others:
        ui.phase(f"waiting for the lane of the {other.what}")
        beside.append((other.what, other.finish(counts)))
    if lane != test_lanes.FIRST:
        test_lanes.write_results(lane, counts, ui.phase_durations())
    ui.info(f"\ntests took {time.monotonic() - start:.0f} s")
    print_timing(counts, beside)
    if counts.failures:
        ui.info("failed:\n  " + "\n  ".join(counts.failures))
    ui.info(f"{counts.passed} passed, {counts.failed} failed")
    return 0 if counts.failed == 0 else 1
