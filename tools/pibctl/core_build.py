"""Our own C/C++ build (meson): the device core, the switch, unit tests."""

import json
import os
import shutil
from pathlib import Path

from pibctl import paths, source_tree, ui


def _source_of(build_dir):
    """The source tree a meson build directory was configured for."""
    try:
        info = json.loads((build_dir / "meson-info" / "meson-info.json").read_text())
        return Path(info["directories"]["source"]).resolve()
    except (OSError, ValueError, KeyError):
        return None


OPTIONS_FILE = "pib-options.json"  # the options a build directory was set up with


def configure_dir(build_dir, options=(), env=None) -> None:
    """Configures a meson build directory of the copy of this checkout's
    sources that `build_dir` belongs to (source_tree.py), once for the
    given options."""
    src = source_tree.ensure()
    wanted = json.dumps([str(o) for o in options])
    stamp = build_dir / OPTIONS_FILE
    if ((build_dir / "build.ninja").is_file() and _source_of(build_dir) == src.resolve()
            and stamp.is_file() and stamp.read_text() == wanted):
        return
    if build_dir.exists():  # half made, its tree made anew, or other options
        shutil.rmtree(build_dir)
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    ui.run_logged(["meson", "setup", *options, build_dir, src], "core-build", "meson setup",
                  env=source_tree.ccache_env(env))
    stamp.write_text(wanted)


def ninja(build_dir, targets=(), what="ninja", env=None) -> None:
    ui.run_logged(["ninja", "-C", build_dir, *targets], "core-build", what,
                  env=source_tree.ccache_env(env))


_configure = configure_dir


# ./pib's builds compile the core and the code it shares with the switch
# as unity files of UNITY_SIZE sources each (meson_options.txt): the files
# share most of their headers, and this halves their compile time (a cold
# ./pib test is bound by its two cores). A build of your own (meson setup)
# compiles each file alone, and so checks that each includes what it uses.
UNITY_SIZE = 8
UNITY = [f"-Dunity_files={UNITY_SIZE}"]
# Setup's build (the switch, ./pib bench's benchmarks): optimised, with
# line tables (-g1) rather than full debug information: a crash report's
# backtrace and a debugger's breakpoints still name functions and source
# lines, and the switch compiles in three quarters of the time (the core
# in QEMU's build likewise, qemu-hw/glue/meson.build).
OPTIMISED = [*UNITY, "-Dcpp_args=-g1", "-Dc_args=-g1"]


# What a fabric needs of our build: the switch.
SWITCH_TARGETS = ["fabric-switch/pib-fabric-switch"]
# The benchmarks: ./pib bench's, in setup's build (the core optimised and
# compiled once more for them), and those ./pib test checks, in the unit
# tests' sanitized build, whose core they share.
BENCH_TARGETS = ["tests/bench/fabric-bench", "tests/bench/core-bench"]


def build() -> None:
    """What `./pib setup` builds: the switch. The benchmarks and the unit
    tests are built where they run (build_benches, build_checked_benches,
    build_tests): in ./pib test's host lane, beside the guests, off a cold run's critical path."""
    ui.step("pib-hca switch (meson)")
    build_dir = paths.core_build_dir()
    _configure(build_dir, OPTIMISED)
    ninja(build_dir, SWITCH_TARGETS)
    ui.detail(f"built in {build_dir}")


def build_benches() -> None:
    """core-bench and fabric-bench optimised, in setup's build directory:
    ./pib bench's."""
    ui.step("pib-hca benchmarks (meson)")
    build_dir = paths.core_build_dir()
    _configure(build_dir, OPTIMISED)
    ninja(build_dir, BENCH_TARGETS, what="ninja (benchmarks)")


def build_checked_benches() -> None:
    """core-bench and fabric-bench under the sanitizers, in the unit
    tests' build: what ./pib test compiles and runs (the fabric
    benchmark's bytes checked, its figures not kept). Only their own
    sources compile: an optimised build cost a cold run's host lane a
    third compile of the core, some 150 s beside the guests."""
    ui.step("pib-hca benchmarks (meson), with clang's sanitizers")
    ninja(sanitized_build_dir(), BENCH_TARGETS, "ninja (benchmarks, sanitizers)",
          env=configure_sanitized())


UNIT_TESTS = "tests/unit/core-tests"
# The hardware and core headers compiled as C (tests/unit/meson.build).
C_HEADER_CHECK = "tests/unit/libc-header-check.a"


def build_tests() -> None:
    """The unit tests, once: with clang under AddressSanitizer and UBSan
    (random guest input must not reach undefined behaviour or leak), in
    the fuzzers' build, which shares their core. GCC compiles the core
    and the switch warning-free in setup's build and in QEMU's, and the
    headers' C check here: a GCC build of the tests as well cost a cold
    run some 900 s of compile jobs beside the guests and found nothing
    the sanitized one does not."""
    ui.step("pib-hca unit tests (meson), with clang's sanitizers")
    build_dir = paths.core_build_dir()
    _configure(build_dir, OPTIMISED)
    ninja(build_dir, [C_HEADER_CHECK], what="ninja (the headers as C)")
    env = configure_sanitized()
    ninja(sanitized_build_dir(), [UNIT_TESTS], "ninja (sanitizers)", env=env)
    ui.detail(f"built in {sanitized_build_dir()}")


def sanitized_build_dir():
    """The build of the sanitized unit tests and of the fuzzers: the core
    and the switch are compiled once for both (a cold ./pib test is
    bound by its two cores' compile time)."""
    return source_tree.build_dir("fuzz")


def configure_sanitized() -> dict:
    """Configures sanitized_build_dir(): clang with ASan and UBSan, every
    report fatal, libFuzzer's coverage compiled in (the fuzzers link
    libFuzzer; the unit tests run without it) and line tables only, what
    a report's stack shows, in far less time than full debug information.
    Returns the environment its commands take."""
    flags = "-fsanitize=fuzzer-no-link -fno-sanitize-recover=all -gline-tables-only"
    env = dict(os.environ, CC="ccache clang", CXX="ccache clang++")
    configure_dir(sanitized_build_dir(), [
        *UNITY, "-Dfuzzers=true", "-Db_sanitize=address,undefined", "-Db_lundef=false",
        f"-Dcpp_args={flags}", f"-Dc_args={flags}"], env=env)
    return env
