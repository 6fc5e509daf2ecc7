"""./pib test: the checks that need no guest (unit tests, build checks,
fuzzers, qtest), and the end-to-end passes, each a pytest session of
tests/e2e on a fabric of its own (e2e_pass.py). Ends with the line
`N passed, N failed`."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pibctl import (checkout_checks, container, core_build, driver_build, e2e_pass,
                    fabric_bench, fuzzing, mlx5_layouts, package_checks, paths, qemu_build, setup, sources,
                    stale_state_checks, test_lanes, ui)

E2E_DIR = e2e_pass.E2E_DIR


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


@dataclass(frozen=True)
class Selection:
    """Which end-to-end tests run, as pytest takes it: ./pib test's -k
    (an expression over names), -m (over markers, tests/e2e/pytest.ini),
    --lf (only what failed last time, per pass) and --soak."""
    keyword: str = ""
    markers: str = ""
    last_failed: bool = False
    soaks: bool = False

    def pytest_args(self) -> list:
        # A pass that failed nothing last time runs nothing (and boots nothing).
        args = ["--lf", "--lfnf=none"] if self.last_failed else []
        return self._expressions() + args + (["--pib-soak"] if self.soaks else [])

    def options(self) -> list:
        """The same for a child ./pib test (test_lanes.py)."""
        args = ["--lf"] if self.last_failed else []
        return self._expressions() + args + (["--soak"] if self.soaks else [])

    def _expressions(self) -> list:
        """-k and -m, which ./pib test and pytest spell alike."""
        return ((["-k", self.keyword] if self.keyword else [])
                + (["-m", self.markers] if self.markers else []))


def _forget_e2e_modules() -> None:
    """Each pass's pytest session imports tests/e2e afresh, as a session
    of its own process would: no module state carries over."""
    for name, module in list(sys.modules.items()):
        if str(getattr(module, "__file__", "") or "").startswith(str(E2E_DIR) + os.sep):
            del sys.modules[name]


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


def check_python(counts: Counts) -> None:
    """pyflakes over ./pib and the test suites' Python: no unused import
    or name, no undefined one, no f-string without a field."""
    ui.step("pyflakes: tools/, tests/")
    start = time.monotonic()
    found = subprocess.run([sys.executable, "-m", "pyflakes", "tools", "tests"], cwd=paths.REPO,
                           capture_output=True, text=True, errors="replace")
    report = (found.stdout + found.stderr).strip()
    counts.record("pyflakes finds nothing in tools/ and tests/", found.returncode == 0 and not report,
                  time.monotonic() - start, report)


BENCHES_BUILD = "core-bench and fabric-bench build warning-free under the sanitizers"
CONTAINER_BASE = ("the container image's base is ready ahead of its test: podman, and "
                  "debootstrap's bookworm with the libraries QEMU and the switch load")
CONTAINER_IMAGE = "./pib container builds the image ahead of the test that runs it"


def _build_container_image() -> None:
    try:
        container.build()
    except (OSError, subprocess.CalledProcessError) as e:
        raise ui.StepFailed(f"./pib container: {e}") from None


def check_fabric_bench(counts: Counts, build: bool = True) -> None:
    """The fabric benchmark runs, and the bytes of each run arrive. `build`:
    builds it first (else the host lane did)."""
    if build and not _check(counts, BENCHES_BUILD, core_build.build_checked_benches):
        return
    ui.step("The fabric benchmark (two device processes, switch processes, no guest)")
    for switches, cable in fabric_bench.LAYOUTS:
        _check(counts, "fabric-bench moves RC WRITE, SEND and READ of 8 B to 1 MiB through "
               f"{fabric_bench.describe(switches, cable)}, every byte compared",
               lambda s=switches, c=cable: fabric_bench.check(
                   s, c, core_build.sanitized_build_dir()))
    _check(counts, "fabric-bench moves RC WRITEs of two pairs at once through 1 switch process, "
           "and through a switch process each, every byte compared",
           lambda: fabric_bench.check_pairs(core_build.sanitized_build_dir()))


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


def _print_phases(phases, cpu: bool = True) -> None:
    """Each phase and its steps; with `cpu`, what the machine's CPUs did
    meanwhile: busy at normal priority (the fabrics' QEMUs and switches,
    the tests), busy at low priority (the host lane, niced) and idle. The
    numbers are the machine's, so the host lane's own table is the same
    story from its side."""
    cpus = os.cpu_count() or 1
    for name, seconds, steps, *cores in phases:
        ui.info(f"  {seconds:7.0f} s  {_first_line(name, 90)}")
        if cpu and cores and seconds >= 5:
            busy, low = cores[0]
            ui.info(f"             of the {cpus} CPUs: {busy:.1f} busy, {low:.1f} busy at low "
                    f"priority, {max(0.0, cpus - busy - low):.1f} idle")
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
        _print_phases((p for p in phases if p[0] != "setup"), cpu=False)
    ui.info(f"the {slowest} slowest checks:")
    for seconds, name in sorted(counts.seconds, reverse=True)[:slowest]:
        ui.info(f"  {seconds:7.0f} s  {_first_line(name, 90)}")


# The end-to-end passes (./pib test --pass), each on a fabric of its own
# (e2e_pass.PASSES), in the order one lane runs them.
PASSES = tuple(e2e_pass.PASSES)
# With two lanes, the second takes these and the first the rest: about
# equal halves of the e2e time (main 405 s, hostile 143 s, own kernel 28 s
# against ConnectX 298 s, two switches 225 s in a run of one lane).
SECOND_LANE = ("connectx", "two-switches")
# Two lanes need this many host CPUs. On two, the guests of two fabrics
# starve each other's QEMUs of the CPU for longer than RC's ACK timeouts:
# ibv_rc_pingpong and the fault tests ended in RETRY_EXC when tried. A
# second lane begun only once the host lane had ended (22a4f04) gained a
# cold run 50 s: the ConnectX pass took 771 s instead of 478, the
# simulated fabric booted in 331 s instead of 62.
LANES_MIN_CPUS = 4


def default_lanes() -> int:
    return 2 if (os.cpu_count() or 1) >= LANES_MIN_CPUS else 1


def run_pass(counts: Counts, name: str, chosen: Selection, vms: int, accel: str,
             booted=None, timeout: int = 0) -> None:
    """One end-to-end pass of PASSES: a pytest session of tests/e2e on
    the pass's fabric (tests/e2e/conftest.py), counted in `counts`. Its
    JUnit XML goes beside the lanes' logs. `booted` is called once the
    fabric's boot has ended, however it ended; `timeout` replaces
    pytest.ini's seconds per test."""
    # pytest is a host package (hostdeps.py): there once setup has run.
    import pytest

    from pibctl import e2e_report

    which = e2e_pass.PASSES[name]
    run = e2e_pass.PassRun(which, vms, accel, record=counts.record, booted=booted)
    reporter = e2e_report.Reporter(counts, which.suffix)
    args = [str(E2E_DIR), "--capture=no", "--tb=short",
            f"--pib-pass={name}", f"--junitxml={junit_file(name)}",
            "-o", f"junit_suite_name=pib-hca-e2e-{name}",
            "-o", f"cache_dir={paths.cache_dir() / 'pytest' / name}", *chosen.pytest_args()]
    if timeout:
        args.append(f"--timeout={timeout}")
    _forget_e2e_modules()
    code = pytest.main(args, plugins=[run, reporter])
    if reporter.interrupted:
        raise KeyboardInterrupt
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        counts.record(f"pytest runs the end-to-end pass {name}", False, 0,
                      f"pytest {' '.join(args)} ended with {code.name}")


def junit_file(name: str) -> Path:
    """The JUnit XML of pass `name`'s last run."""
    return paths.cache_dir() / f"test-e2e-{name}.xml"


def _split_lanes(passes, lanes: int):
    """(the passes this process runs, those a second lane runs)."""
    if lanes < 2:
        return list(passes), []
    theirs = [p for p in SECOND_LANE if p in passes]
    return [p for p in passes if p not in theirs], theirs


def run_host_checks(counts: Counts, bench: bool = True) -> None:
    """Every check that needs no guest. `bench`: also the fabric
    benchmark's, whose RC timeouts are real time (the host lane only
    builds it, and leaves the run to the first lane, at the usual priority
    once the guests are down)."""
    if not bench:
        # Beside the end-to-end passes: the container test's image, a
        # minute of downloads and unpacking and half a minute of packing
        # (test_pib_run's ./pib container then finds it), off their
        # critical path.
        ui.phase("the container image")
        if _check(counts, CONTAINER_BASE, container.prepare_base):
            _check(counts, CONTAINER_IMAGE, _build_container_image)
    ui.phase("unit tests and build checks")
    run_unit_tests(counts)
    if not bench:
        _check(counts, BENCHES_BUILD, core_build.build_checked_benches)
    check_python(counts)
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


def run(chosen: Selection = Selection(), unit: bool = True, e2e: bool = True, vms: int = 2,
        accel: str = "tcg", passes=PASSES, lanes: int = 0,
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
        os.environ[e2e_pass.MORE_TRACE] = trace
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
            others.append(test_lanes.second_lane(theirs, chosen, vms, accel))
        try:
            for name in mine:
                run_pass(counts, name, chosen, vms, accel, booted=start_host_lane)
            start_host_lane()  # if no pass of this lane booted a fabric
        except BaseException:
            for other in others:
                other.stop()
            raise
    beside = []
    for other in others:
        ui.phase(f"waiting for the lane of the {other.what}")
        beside.append((other.what, other.finish(counts)))
    if unit and e2e and lane == test_lanes.FIRST:
        # Built by the host lane; run here, with no guest beside it.
        ui.phase("the fabric benchmark")
        check_fabric_bench(counts, build=False)
    if lane != test_lanes.FIRST:
        test_lanes.write_results(lane, counts, ui.phase_durations())
    ui.info(f"\ntests took {time.monotonic() - start:.0f} s")
    print_timing(counts, beside)
    if counts.failures:
        ui.info("failed:\n  " + "\n  ".join(counts.failures))
    ui.info(f"{counts.passed} passed, {counts.failed} failed")
    return 0 if counts.failed == 0 else 1
