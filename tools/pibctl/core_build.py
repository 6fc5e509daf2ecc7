"""Our own C/C++ build (meson): the device core, the switch, unit tests."""

import json
import shutil
from pathlib import Path

from pibctl import paths, ui


def _source_of(build_dir):
    """The source tree a meson build directory was configured for."""
    try:
        info = json.loads((build_dir / "meson-info" / "meson-info.json").read_text())
        return Path(info["directories"]["source"]).resolve()
    except (OSError, ValueError, KeyError):
        return None


def configure_dir(build_dir, options=(), env=None) -> None:
    """Configures a meson build directory of this checkout, once."""
    # The cache outlives any one clone: a build directory made for another
    # checkout would build that checkout's sources. Start it afresh.
    if (build_dir / "build.ninja").is_file() and _source_of(build_dir) == paths.REPO.resolve():
        return
    if build_dir.exists():
        shutil.rmtree(build_dir)
    build_dir.parent.mkdir(parents=True, exist_ok=True)
    ui.run_logged(["meson", "setup", *options, build_dir, paths.REPO], "core-build", "meson setup",
                  env=env)


_configure = configure_dir


def build() -> None:
    ui.step("pib-hca core and unit tests (meson)")
    build_dir = paths.core_build_dir()
    _configure(build_dir)
    ui.run_logged(["ninja", "-C", build_dir], "core-build", "ninja")
    ui.detail(f"built in {build_dir}")
    # The unit tests once more under AddressSanitizer and UBSan: random
    # guest input must not reach undefined behaviour or leak.
    sanitized = sanitized_build_dir()
    # GCC 12 reports false maybe-uninitialized warnings inside <regex>
    # (used by Catch2) when instrumenting; the plain build keeps them.
    _configure(sanitized, ["-Db_sanitize=address,undefined", "-Db_lundef=false",
                           "-Dcpp_args=-Wno-maybe-uninitialized"])
    ui.run_logged(["ninja", "-C", sanitized, "tests/unit/core-tests"], "core-build",
                  "ninja (sanitizers)")
    ui.detail(f"sanitized unit tests built in {sanitized}")


def sanitized_build_dir():
    return paths.cache_dir() / "build" / "pib-sanitize"
