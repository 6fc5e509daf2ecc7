"""QEMU 10.0.2 with the pib-hca device: unpack, patch, configure, build."""

import filecmp
import json
import shlex
import shutil
import subprocess
from pathlib import Path

from pibctl import core_build, paths, sources, stamps, ui

CONFIGURE_FLAGS = [
    "--python=/usr/bin/python3",
    "--target-list=x86_64-softmmu",
    "--disable-docs",
    "--disable-werror",
    "--without-default-features",
    "--enable-kvm",
    "--enable-tcg",
    "--enable-slirp",
    "--enable-vde",
    "--enable-pixman",
    "--enable-trace-backends=log",
    "--disable-download",
    "--disable-install-blobs",
]

# Version of the edits patch_tree() makes; bump it when they change.
PATCH_LEVEL = "4"

GLUE_DIR = paths.REPO / "qemu-hw" / "glue"
GLUE_SOURCES = ["pib-hca.c", "pib-hca-monitor.c"]
SHARED_HEADERS = [
    paths.REPO / "include" / "pib_hw.h",
    paths.REPO / "qemu-hw" / "core" / "include" / "pib_core.h",
    paths.REPO / "qemu-hw" / "core" / "include" / "pib_events.h",
]


def _src() -> Path:
    return paths.cache_dir() / "qemu" / "src"


def _build() -> Path:
    return paths.cache_dir() / "qemu" / "build"


def _replace_once(path: Path, old: str, new: str) -> None:
    """Replaces the first `old` with `new`; a tree that has no `old` but
    already has `new` counts as patched."""
    text = path.read_text()
    if old in text:
        path.write_text(text.replace(old, new, 1))
    elif new not in text:
        raise ui.StepFailed(f"cannot patch {path}: '{old.strip()}' not found")


HMP_INFO_ANCHOR = """    {
        .name       = "rocker",
"""
HMP_INFO_PIB = """    {
        .name       = "pib",
        .args_type  = "args:S?",
        .params     = "[id] [port|eq|cq|qp|srq|mr N]",
        .help       = "show a pib-hca InfiniBand adapter's state, or one object's",
        .cmd        = hmp_info_pib,
    },

SRST
  ``info pib`` [*id*] [*object* *n*]
    Show a pib-hca adapter's state, or one object's.
ERST

"""
HMP_ANCHOR = """#if defined(TARGET_I386)

    {
        .name       = "mce",
"""
HMP_PIB = """    {
        .name       = "pib_capture",
        .args_type  = "args:S",
        .params     = "[id] port file [count] | [id] port stop",
        .help       = "record a pib-hca port's packets to a pcap file, or stop",
        .cmd        = hmp_pib_capture,
    },

SRST
``pib_capture`` [*id*] *port* *file* [*count*]
  Record a pib-hca port's packets to a pcap file, or stop (*file* ``stop``).
ERST

    {
        .name       = "pib_inject",
        .args_type  = "args:S",
        .params     = "[id] injection",
        .help       = "arm a pib-hca test facility: command, wqe, drop, corrupt, event, stop, resume, fatal, clear",
        .cmd        = hmp_pib_inject,
    },

SRST
``pib_inject`` [*id*] *injection*
  Arm a pib-hca test facility, or do it at once (docs/prm.md, Test facilities).
ERST

"""


def patch_tree(src: Path) -> None:
    # The +ds tarball has no edk2 firmware blobs to unpack.
    _replace_once(src / "meson.build", "unpack_edk2_blobs = bzip2.found()", "unpack_edk2_blobs = false")
    _replace_once(src / "meson.build", "    'hw/misc',\n", "    'hw/misc',\n    'hw/pib',\n")
    _replace_once(src / "hw" / "meson.build", "subdir('misc')\n", "subdir('misc')\nsubdir('pib')\n")
    _replace_once(src / "hw" / "Kconfig", "source misc/Kconfig\n", "source misc/Kconfig\nsource pib/Kconfig\n")
    # The monitor commands: QMP's x-pib-* (qemu-hw/glue/pib.json, synced
    # into qapi/), HMP's `info pib`, pib_capture and pib_inject
    # (pib-hca-monitor.c).
    _replace_once(src / "qapi" / "qapi-schema.json", "{ 'include': 'uefi.json' }\n",
                  "{ 'include': 'uefi.json' }\n{ 'include': 'pib.json' }\n")
    _replace_once(src / "qapi" / "meson.build", "    'pci',\n    'rocker',\n", "    'pci',\n    'pib',\n    'rocker',\n")
    _replace_once(src / "include" / "monitor" / "hmp.h", "void hmp_rocker(Monitor *mon, const QDict *qdict);\n",
                  "void hmp_rocker(Monitor *mon, const QDict *qdict);\n"
                  "void hmp_info_pib(Monitor *mon, const QDict *qdict);\n"
                  "void hmp_pib_capture(Monitor *mon, const QDict *qdict);\n"
                  "void hmp_pib_inject(Monitor *mon, const QDict *qdict);\n")
    _replace_once(src / "hmp-commands-info.hx", HMP_INFO_ANCHOR, HMP_INFO_PIB + HMP_INFO_ANCHOR)
    _replace_once(src / "hmp-commands.hx", HMP_ANCHOR, HMP_PIB + HMP_ANCHOR)


def unpack(tarball: Path) -> None:
    key = f"{sources.QEMU.sha256}:{PATCH_LEVEL}"
    src = _src()
    if stamps.is_current("qemu-src", key) and src.is_dir():
        return
    ui.detail("unpacking and patching the QEMU source")
    if src.exists():
        shutil.rmtree(src)
    if _build().exists():
        shutil.rmtree(_build())
    src.parent.mkdir(parents=True, exist_ok=True)
    tmp = src.parent / "unpack.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    ui.run_logged(["tar", "-xf", tarball, "-C", tmp], "qemu-build", "tar")
    (unpacked,) = list(tmp.iterdir())
    unpacked.rename(src)
    tmp.rmdir()
    patch_tree(src)
    (src / "hw" / "pib").mkdir(exist_ok=True)
    stamps.mark("qemu-src", key)


def _sync_file(source: Path, target: Path) -> bool:
    """Copies source to target if the contents differ (so ninja sees a new
    mtime exactly when something changed). Returns True if copied."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file() and filecmp.cmp(source, target, shallow=False):
        return False
    shutil.copy2(source, target)
    target.touch()
    return True


def sync_glue() -> None:
    pib = _src() / "hw" / "pib"
    for f in GLUE_DIR.iterdir():
        if f.is_file():
            _sync_file(f, pib / f.name)
    for h in SHARED_HEADERS:
        _sync_file(h, pib / "include" / h.name)
    _sync_file(GLUE_DIR / "pib.json", _src() / "qapi" / "pib.json")
    if _sync_file(_full_archive(core_build.core_library()), pib / "lib" / "libpibcore.a"):
        # The core is a link_args input ninja does not track: force a relink.
        paths.qemu_binary().unlink(missing_ok=True)


def _full_archive(thin: Path) -> Path:
    """meson makes thin archives, which only point at their objects; QEMU
    gets a self-contained, deterministic copy instead."""
    members = ui.run_quiet(["ar", "t", thin]).split()
    full = _src().parent / "libpibcore.full.a"
    full.unlink(missing_ok=True)
    base = thin.parent
    ui.run_quiet(["ar", "rcsD", full, *[base / m if not Path(m).is_absolute() else m for m in members]])
    return full


def configure() -> None:
    key = stamps.hash_files([], " ".join(CONFIGURE_FLAGS) + PATCH_LEVEL + sources.QEMU.sha256)
    build = _build()
    if stamps.is_current("qemu-configure", key) and (build / "build.ninja").is_file():
        return
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    ui.detail("configuring QEMU")
    ui.run_logged([_src() / "configure", *CONFIGURE_FLAGS], "qemu-build", "configure", cwd=build)
    stamps.mark("qemu-configure", key)


def check_glue_warnings() -> None:
    """QEMU is built without -Werror, but our glue must be warning-free:
    recompile it alone with QEMU's own flags plus -Werror."""
    db = json.loads((_build() / "compile_commands.json").read_text())
    for name in GLUE_SOURCES:
        entry = next((e for e in db if e["file"].endswith(f"hw/pib/{name}")), None)
        if entry is None:
            raise ui.StepFailed(f"hw/pib/{name} is not in QEMU's compile_commands.json")
        args = shlex.split(entry["command"])
        out = args.index("-o")
        del args[out : out + 2]
        args += ["-Werror", "-fsyntax-only"]
        proc = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise ui.StepFailed(f"warnings in qemu-hw/glue/{name}:\n{proc.stderr}")


def build() -> None:
    ui.step("QEMU 10.0.2 with -device pib-hca")
    tarball = sources.fetch(sources.QEMU)
    unpack(tarball)
    sync_glue()
    configure()
    ui.detail("building qemu-system-x86_64 (about 3 minutes on 2 cores when cold)")
    ui.run_logged(["ninja", "-C", _build(), "qemu-system-x86_64"], "qemu-build", "ninja")
    check_glue_warnings()
    help_text = ui.run_quiet([paths.qemu_binary(), "-device", "pib-hca,help"])
    if "node-guid" not in help_text:
        raise ui.StepFailed("the built QEMU does not list pib-hca's properties")
    ui.detail(f"{paths.qemu_binary()}")
