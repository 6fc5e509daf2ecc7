"""./pib fuzz: the libFuzzer harnesses of tests/fuzz, built with clang,
ASan and UBSan in a build directory of their own, run against a corpus
kept in the cache; and the replay of their checked-in inputs (seeds and
one regression input per defect found) that ./pib test runs."""

import concurrent.futures
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pibctl import core_build, fuzz_coverage, paths, ui

# Harness name -> executable, in tests/fuzz.
TARGETS = {
    "core": "fuzz-core",      # the device core through pib_core.h and a fake host
    # the ConnectX personality: its initialization segment, command queue and pages
    "mlx5": "fuzz-mlx5",
    "switch": "fuzz-switch",  # the fabric switch's logic: frames, SMPs, PMA, forwarding
    # a simulated fabric: its switches and CAs, their cabling, an SM's sweep
    "sim-fabric": "fuzz-sim-fabric",
    # the switch's server on loopback sockets: dialling, retries, link framing, HELLO
    "switch-tcp": "fuzz-switch-tcp",
    "packet": "fuzz-packet",  # the wire framing and the IBA packet parser
    "state": "fuzz-state",    # the device state loader (migration streams)
    "switch-state": "fuzz-switch-state",  # the switch's state loader (fabric snapshots)
}
INPUTS_DIR = paths.REPO / "tests" / "fuzz" / "inputs"
# An input that runs longer than this is a finding (a hang).
INPUT_TIMEOUT_S = 30
REPLAY_INPUT_TIMEOUT_S = 120
SANITIZER_ENV = {
    # Any report is fatal, with a stack; leaks count too.
    "ASAN_OPTIONS": "abort_on_error=1:detect_leaks=1:allocator_may_return_null=1:"
                    "malloc_context_size=8",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
}


def build_dir() -> Path:
    return core_build.sanitized_build_dir()


def corpus_dir(target: str) -> Path:
    return paths.cache_dir() / "fuzz" / "corpus" / target


def crash_dir(target: str) -> Path:
    return paths.cache_dir() / "fuzz" / "crashes" / target


def build() -> None:
    ui.step("fuzzers (clang, libFuzzer, ASan, UBSan)")
    env = core_build.configure_sanitized()
    core_build.ninja(build_dir(), [f"tests/fuzz/{exe}" for exe in TARGETS.values()],
                     "ninja (fuzzers)", env=env)
    ui.detail(f"built in {build_dir() / 'tests' / 'fuzz'}")


def _binary(target: str) -> Path:
    return build_dir() / "tests" / "fuzz" / TARGETS[target]


def _inputs(target: str):
    d = INPUTS_DIR / target
    return sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []


def _env():
    return dict(os.environ, **SANITIZER_ENV)


def replay(counts) -> None:
    """For ./pib test: every checked-in input of each harness once, then a
    short run of each from those inputs (in a scratch corpus: nothing is
    written into the clone). Two targets at a time: each is one process,
    and the machines have two cores."""
    ui.step("Fuzz targets: checked-in inputs, then a short run of each")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(_replay_target, TARGETS))
    for checks in results:
        for name, ok, seconds, stderr in checks:
            if not ok:
                print(stderr[-6000:])
            counts.record(name, ok, seconds)


def _replay_target(target: str):
    """(name, ok, seconds, stderr) of one target's replay and short run."""
    inputs = _inputs(target)
    start = time.monotonic()
    proc = subprocess.run([_binary(target), "-malloc_limit_mb=256", *inputs],
                          capture_output=True, text=True, errors="replace", env=_env(),
                          timeout=600)
    checks = [(f"fuzz {target}: {len(inputs)} checked-in inputs replayed",
               proc.returncode == 0 and len(inputs) > 0, time.monotonic() - start, proc.stderr)]
    with tempfile.TemporaryDirectory() as scratch:
        for p in inputs:
            shutil.copy(p, scratch)
        start = time.monotonic()
        # ./pib test runs this at the idle CPU priority, beside guests that
        # may leave it no CPU for a while: an input is a hang only later.
        stats, proc = _run(target, ["-max_total_time=15", "-seed=1", scratch], quiet=True,
                           input_timeout=REPLAY_INPUT_TIMEOUT_S)
        checks.append((f"fuzz {target}: 15 s from the checked-in inputs, "
                       f"{stats.get('execs', 0)} executions, no finding", proc.returncode == 0,
                       time.monotonic() - start, proc.stderr))
    return checks


def _run(target: str, args, quiet: bool, input_timeout: int = INPUT_TIMEOUT_S):
    crashes = crash_dir(target)
    crashes.mkdir(parents=True, exist_ok=True)
    cmd = [_binary(target), "-print_final_stats=1", "-rss_limit_mb=4096", "-malloc_limit_mb=256",
           f"-timeout={input_timeout}",
           f"-artifact_prefix={crashes}/", *[str(a) for a in args]]
    if quiet:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=_env())
        text = proc.stderr
    else:
        # Progress as it comes: libFuzzer reports on stderr.
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, errors="replace",
                                env=_env())
        lines = []
        last = 0.0
        for line in proc.stderr:
            lines.append(line)
            if " pulse " in line or "DONE" in line or time.monotonic() - last > 30:
                if line.startswith("#"):
                    ui.detail(f"{target}: {line.strip()}")
                    last = time.monotonic()
        proc.wait()
        text = "".join(lines[-400:])
        proc.stderr = text
    return _stats(text), proc


def _stats(text: str) -> dict:
    stats = {}
    # -fork mode reports the campaign's running total on each status line
    # ("#N: cov: ... job: K"); its children's final stats are their own.
    totals = re.findall(r"^#(\d+): cov", text, re.MULTILINE)
    m = re.search(r"stat::number_of_executed_units:\s*(\d+)", text)
    if totals:
        stats["execs"] = int(totals[-1])
    elif m:
        stats["execs"] = int(m.group(1))
    covs = re.findall(r"cov: (\d+) ft: (\d+)", text)
    if covs:
        stats["cov"], stats["ft"] = map(int, covs[-1])
    m = re.search(r"corp: (\d+)/", text.split("DONE")[-1]) if "DONE" in text else None
    if m:
        stats["corpus"] = int(m.group(1))
    return stats


# Targets that are not libFuzzer harnesses.
QTEST_ACCESSES = 1_000_000
OTHER_TARGETS = {
    "qtest": "random MMIO and configuration-space accesses to the built QEMU's pib-hca, "
             f"with each personality (at least {QTEST_ACCESSES} accesses each)",
    "fabric": "random input into a switch port and into an HCA port of a booted fabric "
              "(tests/e2e/test_hostile.py, --minutes each)",
}


def _run_fabric(minutes: float) -> bool:
    """The hostile-peer tests' random input, `minutes` into each port, on a
    fabric of their own."""
    from pibctl import setup, testing

    setup.run()
    os.environ["PIB_HOSTILE_SECONDS"] = str(int(minutes * 60))
    os.environ["PIB_RUN_DIR"] = str(paths.cache_dir() / "fuzz-run")
    counts = testing.Counts()
    # Each test floods for `minutes`, then checks the guests: more than the
    # usual limit of one end-to-end test.
    testing.run_pass(counts, "hostile", testing.Selection(keyword="random_input"), vms=3,
                     accel="tcg", timeout=int(minutes * 60) + 300)
    ui.info(f"{counts.passed} passed, {counts.failed} failed")
    return counts.failed == 0 and counts.passed > 0


def _qtest_drivers():
    """Each personality's qtest driver, by the name the checks give it."""
    from pibctl import mmio_fuzz, mmio_fuzz_mlx5

    return (("pib-hca", mmio_fuzz.run), ("pib-hca,personality=mlx5", mmio_fuzz_mlx5.run))


def qtest(counts, accesses: int) -> None:
    """For ./pib test: random accesses to the built QEMU through qtest,
    `accesses` for each personality."""
    for device, run in _qtest_drivers():
        ui.step(f"qtest: {accesses} random accesses to QEMU's {device}")
        start = time.monotonic()
        try:
            made, seconds, errors = run(accesses, seed=int(time.time()))
            ok = True
            detail = (f"{made} accesses in {seconds:.0f} s, {sum(errors.values())} guest errors "
                      "reported")
        except (RuntimeError, AssertionError, OSError) as e:  # OSError: no QEMU to start
            ok, detail = False, str(e)
            print(detail)
        counts.record(f"qtest: random MMIO and config space to QEMU's {device}: {detail[:100]}",
                      ok, time.monotonic() - start)


def _run_qtest(minutes: float) -> bool:
    """./pib fuzz qtest: QTEST_ACCESSES random accesses to each personality."""
    ok = True
    for device, run in _qtest_drivers():
        ui.step(f"qtest: random accesses to {device} in {paths.qemu_binary()}")
        try:
            made, seconds, errors = run(QTEST_ACCESSES, seed=int(time.time()), minutes=minutes)
        except (RuntimeError, AssertionError) as e:
            print(e)
            ok = False
            continue
        ui.detail(f"qtest: {made} accesses in {seconds:.0f} s; QEMU answered every one")
        top = sorted(errors.items(), key=lambda kv: -kv[1])
        ui.detail("guest errors reported: " + ", ".join(f"{k} {v}" for k, v in top))
    return ok


def _report_coverage(targets) -> None:
    """What each target's corpus reaches (fuzz_coverage.py). Not a
    finding either way: a campaign's result stands without it."""
    ui.step("coverage: each corpus replayed once with clang's source-based coverage")
    try:
        fuzz_coverage.build([TARGETS[t] for t in targets])
        for target in targets:
            inputs = [d for d in (corpus_dir(target), INPUTS_DIR / target) if d.is_dir()]
            fuzz_coverage.report(target, TARGETS[target], inputs)
    except (ui.StepFailed, subprocess.SubprocessError, OSError, ValueError) as e:
        ui.warn(f"no coverage report: {e}")


def run(minutes: float, targets, jobs: int = 1) -> int:
    """./pib fuzz: each harness for `minutes`, from its corpus in the cache
    (which grows) and the checked-in inputs (read only); with `jobs` > 1 in
    libFuzzer's fork mode, that many processes at once."""
    if any(t in TARGETS for t in targets):
        build()
    failed, interrupted = [], []
    for target in targets:
        if target in OTHER_TARGETS:
            ok = _run_qtest(0) if target == "qtest" else _run_fabric(minutes)
            if not ok:
                failed.append(target)
            continue
        corpus = corpus_dir(target)
        corpus.mkdir(parents=True, exist_ok=True)
        ui.step(f"fuzz {target}: {minutes:g} min, corpus {corpus}")
        before = set(crash_dir(target).glob("*")) if crash_dir(target).is_dir() else set()
        args = [f"-max_total_time={int(minutes * 60)}", corpus]
        if jobs > 1:
            args.insert(0, f"-fork={jobs}")
        if (INPUTS_DIR / target).is_dir():
            args.append(INPUTS_DIR / target)
        stats, proc = _run(target, args, quiet=False)
        found = sorted(set(crash_dir(target).glob("*")) - before)
        ui.detail(f"{target}: {stats.get('execs', 0)} executions, coverage {stats.get('cov', 0)} "
                  f"edges ({stats.get('ft', 0)} features), corpus {stats.get('corpus', '?')} inputs, "
                  f"{len(found)} findings")
        if not found and "run interrupted" in proc.stderr:
            interrupted.append(target)  # stopped by a signal: not a finding
        elif proc.returncode != 0 or found:
            failed.append(target)
            print(proc.stderr[-6000:])
            for f in found:
                ui.detail(f"finding: {f}")
    libfuzzer_targets = [t for t in targets if t in TARGETS]
    if libfuzzer_targets:
        _report_coverage(libfuzzer_targets)
    if failed:
        ui.info("findings in: " + ", ".join(failed))
        return 1
    if interrupted:
        ui.info("interrupted, no findings: " + ", ".join(interrupted))
        return 1
    ui.info("no findings")
    return 0
