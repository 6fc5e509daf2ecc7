"""The rdma-core provider: built inside rdma-core's source tree (no Debian
package ships infiniband/driver.h) as providers/pib, for two versions:

- rdma-core 56.1 (private ABI 34), the guests' trixie userspace: this
  build goes into the image as the guests' provider;
- rdma-core 65 (private ABI 65), the newest in Debian: built with its own
  libibverbs and two of its programs, installed in the image under
  /opt/rdma-core-65 so a guest runs that rdma-core against the device."""

import filecmp
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from pibctl import paths, sources, stamps, ui

PROVIDER_DIR = paths.REPO / "guest-provider"
SHARED_HEADERS = [paths.REPO / "include" / "pib_hw.h", paths.REPO / "include" / "pib_user_abi.h"]
PATCH_LEVEL = "1"
CMAKE_FLAGS = ["-GNinja", "-DNO_PYVERBS=1", "-DNO_MAN_PAGES=1", "-DENABLE_WERROR=1"]


@dataclass(frozen=True)
class RdmaCore:
    tarball: sources.Tarball
    version: str
    pabi: str  # rdma-core's private ABI: the provider's file name has it
    cache_name: str
    prefix: str = ""  # an install prefix of its own (the newest build)
    programs: tuple = ()  # its programs a guest runs with it

    @property
    def target(self) -> str:
        return f"pib-rdmav{self.pabi}"

    @property
    def library(self) -> str:
        return f"lib{self.target}.so"


GUEST = RdmaCore(sources.RDMA_CORE, "56.1", "34", "rdma-core")
NEWEST = RdmaCore(sources.RDMA_CORE_NEWEST, "65.0", "65", "rdma-core-65",
                  prefix="/opt/rdma-core-65", programs=("ibv_devinfo", "ibv_rc_pingpong"))


def _root(rc: RdmaCore) -> Path:
    return paths.cache_dir() / rc.cache_name


def _unpack(rc: RdmaCore, tarball: Path) -> Path:
    src = _root(rc) / "src"
    key = f"{rc.tarball.sha256}:{PATCH_LEVEL}"
    if stamps.is_current(f"{rc.cache_name}-src", key) and src.is_dir():
        return src
    ui.detail(f"unpacking rdma-core {rc.version}")
    if _root(rc).exists():
        shutil.rmtree(_root(rc))
    tmp = _root(rc) / "unpack.tmp"
    tmp.mkdir(parents=True)
    ui.run_logged(["tar", "-xzf", tarball, "-C", tmp], "provider", "tar")
    (unpacked,) = list(tmp.iterdir())
    unpacked.rename(src)
    tmp.rmdir()
    cmake = src / "CMakeLists.txt"
    text = cmake.read_text()
    anchor = "add_subdirectory(providers/rxe)\n"
    if anchor not in text:
        raise ui.StepFailed(f"cannot add providers/pib to rdma-core {rc.version}'s CMakeLists.txt")
    cmake.write_text(text.replace(anchor, "add_subdirectory(providers/pib)\n" + anchor, 1))
    stamps.mark(f"{rc.cache_name}-src", key)
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


def build_dir(rc: RdmaCore = GUEST) -> Path:
    return _root(rc) / "build"


def build(rc: RdmaCore = GUEST) -> Path:
    """Builds the provider (and libibverbs, which the guest programs we
    build link against) inside rdma-core `rc`; returns the provider's path.
    Every checkout builds in the one tree: one at a time."""
    tarball = sources.fetch(rc.tarball)
    with paths.cache_lock(rc.cache_name):
        return _build_locked(rc, tarball)


def _build_locked(rc: RdmaCore, tarball: Path) -> Path:
    src = _unpack(rc, tarball)
    _sync(src)
    out = build_dir(rc)
    if not (out / "build.ninja").is_file():
        out.mkdir(parents=True, exist_ok=True)
        prefix = [f"-DCMAKE_INSTALL_PREFIX={rc.prefix}"] if rc.prefix else []
        ui.run_logged(["cmake", *CMAKE_FLAGS, *prefix, src], "provider", f"cmake {rc.version}",
                      cwd=out)
    ui.run_logged(["ninja", "-C", out, rc.target, "ibverbs", *rc.programs], "provider",
                  f"ninja {rc.target}")
    library = out / "lib" / rc.library
    ui.detail(f"provider for rdma-core {rc.version}: {library}")
    return library


def _config_path(rc: RdmaCore, name: str) -> str:
    """A directory rdma-core's build was configured with (config.h)."""
    text = (build_dir(rc) / "include" / "config.h").read_text()
    m = re.search(rf'^#define {name} "([^"]+)"', text, re.M)
    if not m:
        raise ui.StepFailed(f"rdma-core {rc.version}: {name} missing from config.h")
    return m.group(1)


def install_newest(staging: Path, provider: Path) -> None:
    """Puts rdma-core 65's libibverbs, its programs, our provider for it and
    the driver file its libibverbs reads into `staging`, under its prefix."""
    rc, out = NEWEST, build_dir(NEWEST)
    prefix = staging / rc.prefix.lstrip("/")
    (prefix / "lib").mkdir(parents=True, exist_ok=True)
    (prefix / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(out / "lib" / "libibverbs.so.1", prefix / "lib" / "libibverbs.so.1")
    for program in rc.programs:
        shutil.copy2(out / "bin" / program, prefix / "bin" / program)
    provider_dir = staging / _config_path(rc, "VERBS_PROVIDER_DIR").lstrip("/")
    provider_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy2(provider, provider_dir / provider.name)
    config = staging / _config_path(rc, "IBV_CONFIG_DIR").lstrip("/") / "pib.driver"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text("driver pib\n")
