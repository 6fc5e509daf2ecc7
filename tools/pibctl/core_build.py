"""Our own C/C++ build (meson): the device core, the switch, unit tests."""

import shutil

from pibctl import paths, ui


def build() -> None:
    ui.step("pib-hca core and unit tests (meson)")
    build_dir = paths.core_build_dir()
    if not (build_dir / "build.ninja").is_file():
        if build_dir.exists():
            shutil.rmtree(build_dir)
        build_dir.parent.mkdir(parents=True, exist_ok=True)
        ui.run_logged(["meson", "setup", build_dir, paths.REPO], "core-build", "meson setup")
    ui.run_logged(["ninja", "-C", build_dir], "core-build", "ninja")
    ui.detail(f"built in {build_dir}")


def core_library():
    return paths.core_build_dir() / "qemu-hw" / "core" / "libpibcore.a"
