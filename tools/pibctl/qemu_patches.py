"""qemu-hw/ as QEMU's hw/pib: the layout of the device inside a QEMU source
tree, the edits to QEMU's own files that hook it in, and both as a patch
series against upstream QEMU (./pib qemu-patches). ./pib setup builds the
pinned QEMU from the same layout and edits."""

import filecmp
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pibctl import paths, stamps, ui

QEMU_HW = paths.REPO / "qemu-hw"
GLUE = QEMU_HW / "glue"
CORE = QEMU_HW / "core"
COMMON = paths.REPO / "common"
# The glue file that needs the monitor's QAPI (the series' second patch).
MONITOR_SOURCE = "pib-hca-monitor.c"
QAPI_SCHEMA = "pib.json"


def layout() -> dict:
    """hw/pib as QEMU sees it: path in the QEMU tree -> our file."""
    files = {}
    for f in sorted(GLUE.iterdir()):
        if f.is_file() and f.name != QAPI_SCHEMA and not f.name.startswith("."):
            files[f"hw/pib/{f.name}"] = f
    shared = [paths.REPO / "include" / name for name in ("pib_hw.h", "pib_wire.h")]
    for h in [*shared, *sorted((CORE / "include").glob("*.h"))]:
        files[f"hw/pib/include/{h.name}"] = h
    for f in sorted((CORE / "src").rglob("*")):
        if f.is_file():  # the shared core, and the personalities' folders pib/ and mlx5/
            files[f"hw/pib/core/{f.relative_to(CORE / 'src')}"] = f
    for part in ("iba", "state", "wire"):
        for f in sorted((COMMON / part).iterdir()):
            files[f"hw/pib/common/{part}/{f.name}"] = f
    files[f"qapi/{QAPI_SCHEMA}"] = GLUE / QAPI_SCHEMA
    return files


def check_layout() -> None:
    """hw/pib/meson.build must compile exactly the core's and common's
    sources: the two builds of the core may not drift apart."""
    listed = set(re.findall(r"'((?:core(?:/\w+)?|common/\w+)/\w+\.cc)'",
                            (GLUE / "meson.build").read_text()))
    present = {path.removeprefix("hw/pib/") for path in layout() if path.endswith(".cc")}
    if listed != present:
        raise ui.StepFailed("qemu-hw/glue/meson.build and the core's sources differ: "
                            f"missing {sorted(present - listed)}, extra {sorted(listed - present)}")


@dataclass(frozen=True)
class Edit:
    """Text inserted into one of QEMU's files, after `anchor` (or before it)."""
    path: str
    anchor: str
    text: str
    before: bool = False

    def apply(self, tree: Path) -> None:
        target = tree / self.path
        old = target.read_text()
        new = self.text + self.anchor if self.before else self.anchor + self.text
        if new in old:
            return  # applied already
        if old.count(self.anchor) != 1:
            raise ui.StepFailed(f"cannot hook pib-hca into {target}: "
                                f"'{self.anchor.strip()[:60]}' found {old.count(self.anchor)} times")
        target.write_text(old.replace(self.anchor, new))


def _hmp_entry(name: str, args_type: str, params: str, help_: str, cmd: str, doc: str) -> str:
    """One command of QEMU's hmp-commands*.hx tables, with its rST doc."""
    return (f'    {{\n        .name       = "{name}",\n        .args_type  = "{args_type}",\n'
            f'        .params     = "{params}",\n        .help       = "{help_}",\n'
            f'        .cmd        = {cmd},\n    }},\n\nSRST\n{doc}ERST\n\n')


HMP_INFO_PIB = _hmp_entry(
    "pib", "args:S?", "[id] [port|eq|cq|qp|srq|mr|mw N]",
    "show a pib-hca InfiniBand adapter's state, or one object's", "hmp_info_pib",
    "  ``info pib`` [*id*] [*object* *n*]\n    Show a pib-hca adapter's state, or one object's.\n")
HMP_PIB = _hmp_entry(
    "pib_capture", "args:S", "[id] port file [count] | [id] port stop",
    "record a pib-hca port's packets to a pcap file, or stop", "hmp_pib_capture",
    "``pib_capture`` [*id*] *port* *file* [*count*]\n"
    "  Record a pib-hca port's packets to a pcap file, or stop (*file* ``stop``).\n") + _hmp_entry(
    "pib_inject", "args:S", "[id] injection",
    "arm a pib-hca test facility: command, wqe, drop, corrupt, event, stop, resume, fatal, clear",
    "hmp_pib_inject",
    "``pib_inject`` [*id*] *injection*\n"
    "  Arm a pib-hca test facility, or do it at once (docs/prm.md, Test facilities).\n")

# Hooking the device in: its directory, Kconfig and trace events.
DEVICE_EDITS = [
    Edit("meson.build", "    'hw/misc',\n", "    'hw/pib',\n"),
    Edit("hw/meson.build", "subdir('misc')\n", "subdir('pib')\n"),
    Edit("hw/Kconfig", "source misc/Kconfig\n", "source pib/Kconfig\n"),
]
# The monitor commands: QMP's x-pib-* (qapi/pib.json), HMP's `info pib`,
# pib_capture and pib_inject (pib-hca-monitor.c).
MONITOR_EDITS = [
    Edit("qapi/qapi-schema.json", "{ 'include': 'uefi.json' }\n", "{ 'include': 'pib.json' }\n"),
    Edit("qapi/meson.build", "    'pci',\n", "    'pib',\n"),
    Edit("include/monitor/hmp.h", "void hmp_rocker(Monitor *mon, const QDict *qdict);\n",
         "void hmp_info_pib(Monitor *mon, const QDict *qdict);\n"
         "void hmp_pib_capture(Monitor *mon, const QDict *qdict);\n"
         "void hmp_pib_inject(Monitor *mon, const QDict *qdict);\n"),
    Edit("hmp-commands-info.hx", "    {\n        .name       = \"rocker\",\n", HMP_INFO_PIB,
         before=True),
    Edit("hmp-commands.hx", "#if defined(TARGET_I386)\n\n    {\n        .name       = \"mce\",\n",
         HMP_PIB, before=True),
]
MONITOR_MESON_LINE = f"pib_hca_sources += files('{MONITOR_SOURCE}')\n"


def _device_files() -> dict:
    """Patch 1's files: all of hw/pib but the monitor's."""
    files = {p: f for p, f in layout().items()
             if not p.endswith(MONITOR_SOURCE) and not p.startswith("qapi/")}
    return files


def _copy(files: dict, tree: Path, transform=None) -> None:
    for rel, source in files.items():
        target = tree / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if transform and rel == "hw/pib/meson.build":
            target.write_text(transform(source.read_text()))
        else:
            shutil.copy2(source, target)


def sync(tree: Path) -> bool:
    """Lays hw/pib (and qapi/pib.json) out in `tree` from this checkout,
    copying only what differs (so that ninja rebuilds exactly what
    changed), and applies the edits. Returns True if anything changed."""
    check_layout()
    changed = False
    for rel, source in layout().items():
        target = tree / rel
        if target.is_file() and filecmp.cmp(source, target, shallow=False):
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        target.touch()
        changed = True
    for edit in DEVICE_EDITS + MONITOR_EDITS:
        edit.apply(tree)
    return changed


# The patches: (file name stem, subject, body, what each adds).
SUBJECT_DEVICE = "hw/pib: add pib-hca, an emulated InfiniBand host channel adapter"
BODY_DEVICE = """\
pib-hca is a PCIe InfiniBand HCA: a register file, a command interface,
event queues on MSI-X, the IBA transports (RC, UC, UD, XRC) and its
ports' SMA and PMA. Each port is cabled through a chardev to
pib-fabric-switch, which carries real IBA packets between guests. The
device core is C++20 with no QEMU includes (hw/pib/core, hw/pib/common);
pib-hca.c is its QOM glue. Building it needs a C++ compiler, libpcap and
nlohmann-json.

Generated by pib-hca's ./pib qemu-patches from its qemu-hw/.
"""
SUBJECT_MONITOR = "hw/pib: monitor commands for pib-hca (info pib, pib_capture, pib_inject)"
BODY_MONITOR = """\
QMP's x-pib-info, x-pib-capture and x-pib-inject, and HMP's `info pib`,
pib_capture and pib_inject: the device's state and queues, packet
captures of its ports, and its error injection for driver testing.

Generated by pib-hca's ./pib qemu-patches from its qemu-hw/.
"""


def _series_date() -> str:
    """The checkout's last commit date: the same checkout writes the same
    series, byte for byte."""
    proc = subprocess.run(["git", "-C", str(paths.REPO), "log", "-1", "--format=%cI"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() \
        else "2026-01-01T00:00:00+00:00"


def _git(tree: Path, *args, date: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    proc = subprocess.run(["git", "-C", str(tree), "-c", "user.name=pib-hca",
                           "-c", "user.email=pib-hca@localhost", *args],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ui.StepFailed(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def touched() -> list:
    """QEMU's own files the edits change."""
    return sorted({e.path for e in DEVICE_EDITS + MONITOR_EDITS})


def pristine(tarball: Path, into: Path) -> Path:
    """Upstream's copies of the files the series edits, from `tarball`,
    in `into`/<the tarball's top directory>. Unpacking them means
    decompressing the whole tarball, so they are kept in the cache, per
    tarball and file list."""
    key = stamps.hash_files([], f"{tarball.name}:{tarball.stat().st_size}:{' '.join(touched())}")
    kept = paths.cache_dir() / "qemu-pristine" / key[:16]
    if not kept.is_dir():
        tmp = kept.with_name(kept.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        top = subprocess.run(["tar", "-tf", tarball], capture_output=True, text=True,
                             check=True).stdout.split("\n", 1)[0].split("/")[0]
        subprocess.run(["tar", "-xf", tarball, "-C", tmp, *[f"{top}/{p}" for p in touched()]],
                       check=True)
        try:
            tmp.rename(kept)
        except OSError:  # another process kept them first
            shutil.rmtree(tmp, ignore_errors=True)
    (top,) = list(kept.iterdir())
    shutil.copytree(top, into / top.name)
    return into / top.name


def write_series(tarball: Path, out: Path) -> list:
    """Writes the series against the QEMU of `tarball` into `out` (git
    format-patch files, `git am` or `patch -p1` apply them); returns them."""
    check_layout()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tree = pristine(tarball, tmp)
        top = tree.name
        date = _series_date()

        def git(*args):
            return _git(tree, *args, date=date)

        git("init", "-q")
        git("add", "-A")
        git("commit", "-q", "-m", f"upstream {top}")
        _copy(_device_files(), tree, lambda text: text.replace(MONITOR_MESON_LINE, ""))
        for edit in DEVICE_EDITS:
            edit.apply(tree)
        git("add", "-A")
        git("commit", "-q", "-m", SUBJECT_DEVICE, "-m", BODY_DEVICE)
        _copy(layout(), tree)
        for edit in MONITOR_EDITS:
            edit.apply(tree)
        git("add", "-A")
        git("commit", "-q", "-m", SUBJECT_MONITOR, "-m", BODY_MONITOR)
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.patch"):
            old.unlink()
        git("format-patch", "-q", "--no-signature", "-o", str(out.resolve()), "HEAD~2")
    series = sorted(out.glob("*.patch"))
    if len(series) != 2:
        raise ui.StepFailed(f"git format-patch wrote {len(series)} patches, not 2")
    return series


def apply_series(patches, tree: Path) -> None:
    """Applies the series to a QEMU source tree with patch(1)."""
    for patch in patches:
        ui.run_logged(["patch", "-p1", "--forward", "--batch", "-i", patch, "-d", tree],
                      "qemu-patches", f"applying {Path(patch).name}")


def apply_to(tree: Path, pinned_tarball: Path) -> None:
    """Writes the series against the pinned QEMU and applies it to `tree`."""
    with tempfile.TemporaryDirectory() as tmp:
        apply_series(write_series(pinned_tarball, Path(tmp)), tree)


def is_applied(tree: Path) -> bool:
    return (tree / "hw" / "pib" / "pib-hca.c").is_file()
