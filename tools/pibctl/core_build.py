"""Our own C/C++ build (meson): the device core, the switch, unit tests."""

import json
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


def build() -> None:
    ui.step("pib-hca core and unit tests (meson)")
    build_dir = paths.core_build_dir()
    _configure(build_dir)
    ninja(build_dir)
    ui.detail(f"built in {build_dir}")
    # The unit tests once more under AddressSanitizer and UBSan: random
    # guest input must not reach undefined behaviour or leak.
    sanitized = sanitized_build_dir()
    # GCC 12 reports false maybe-uninitialized warnings inside <regex>
    # (used by Catch2) when instrumenting; the plain build keeps them.
    # -O1 and line tables only (what a sanitizer's report shows) build in
    # some 40% of the time -O2 -g takes.
    _configure(sanitized, ["-Db_sanitize=address,undefined", "-Db_lundef=false",
                           "-Doptimization=1", "-Dcpp_args=-Wno-maybe-uninitialized -g1"])
    ninja(sanitized, ["tests/unit/core-tests"], "ninja (sanitizers)")
    ui.detail(f"sanitized unit tests built in {sanitized}")


def sanitized_build_dir():
    return source_tree.build_dir("pib-sanitize")
