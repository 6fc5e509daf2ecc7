"""The rdma-core provider: built inside rdma-core 56.1's source tree (no
Debian package ships infiniband/driver.h) as providers/pib."""

import filecmp
import shutil
from pathlib import Path

from pibctl import paths, sources, stamps, ui

PROVIDER_DIR = paths.REPO / "guest-provider"
SHARED_HEADERS = [paths.REPO / "include" / "pib_hw.h", paths.REPO / "include" / "pib_user_abi.h"]
PATCH_LEVEL = "1"
CMAKE_FLAGS = ["-GNinja", "-DNO_PYVERBS=1", "-DNO_MAN_PAGES=1", "-DENABLE_WERROR=1"]
TARGET = "pib-rdmav34"
LIBRARY = f"lib{TARGET}.so"


def _root() -> Path:
    return paths.cache_dir() / "rdma-core"


def _unpack(tarball: Path) -> Path:
    src = _root() / "src"
    key = f"{sources.RDMA_CORE.sha256}:{PATCH_LEVEL}"
    if stamps.is_current("rdma-core-src", key) and src.is_dir():
        return src
    ui.detail("unpacking rdma-core 56.1")
    if _root().exists():
        shutil.rmtree(_root())
    tmp = _root() / "unpack.tmp"
    tmp.mkdir(parents=True)
    ui.run_logged(["tar", "-xzf", tarball, "-C", tmp], "provider", "tar")
    (unpacked,) = list(tmp.iterdir())
    unpacked.rename(src)
    tmp.rmdir()
    cmake = src / "CMakeLists.txt"
    text = cmake.read_text()
    anchor = "add_subdirectory(providers/rxe)\n"
    if anchor not in text:
        raise ui.StepFailed("cannot add providers/pib to rdma-core's CMakeLists.txt")
    cmake.write_text(text.replace(anchor, "add_subdirectory(providers/pib)\n" + anchor, 1))
    stamps.mark("rdma-core-src", key)
    return src


def _sync(src: Path) -> None:
    dest = src / "providers" / "pib"
    dest.mkdir(exist_ok=True)
    wanted = [p for p in PROVIDER_DIR.iterdir() if p.is_file()] + SHARED_HEADERS
    for f in wanted:
        target = dest / f.name
        if not (target.is_file() and filecmp.cmp(f, target, shallow=False)):
            shutil.copy2(f, target)
            target.touch()
    for stale in set(p.name for p in dest.iterdir()) - set(f.name for f in wanted):
        (dest / stale).unlink()


def build_dir() -> Path:
    return _root() / "build"


def build() -> Path:
    """Builds the provider (and libibverbs, which the guest programs we
    build link against); returns the path of libpib-rdmav34.so."""
    tarball = sources.fetch(sources.RDMA_CORE)
    src = _unpack(tarball)
    _sync(src)
    out = build_dir()
    if not (out / "build.ninja").is_file():
        out.mkdir(parents=True, exist_ok=True)
        ui.run_logged(["cmake", *CMAKE_FLAGS, src], "provider", "cmake", cwd=out)
    ui.run_logged(["ninja", "-C", out, TARGET, "ibverbs"], "provider", f"ninja {TARGET}")
    library = out / "lib" / LIBRARY
    ui.detail(f"provider: {library}")
    return library
