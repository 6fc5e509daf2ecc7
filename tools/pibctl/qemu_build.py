"""QEMU with the pib-hca device: unpack, lay hw/pib out, configure, build."""

import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pibctl import paths, qemu_patches, source_tree, sources, stamps, ui

CONFIGURE_FLAGS = [
    "--python=/usr/bin/python3",
    "--target-list=x86_64-softmmu",
    "--disable-docs",
    "--disable-werror",
    # QEMU's own code without debug information: it compiles in 30% less
    # time (192 s instead of 274 on 2 cores, the build on a fresh
    # machine's critical path). hw/pib's core keeps its own (its
    # meson.build), so a crash report's backtrace still names the lines
    # of the device's code; QEMU's frames show their functions.
    "--disable-debug-info",
    "--without-default-features",
    "--enable-kvm",
    "--enable-tcg",
    "--enable-slirp",
    "--enable-vde",
    "--enable-pixman",
    # virtio-9p, for ./pib fabric up --share (docs/user-guide.md): QEMU's
    # meson gates it on extended attributes, which glibc provides.
    "--enable-attr",
    "--enable-virtfs",
    "--enable-trace-backends=log",
    "--disable-download",
    "--disable-install-blobs",
]

# The devices of the QEMUs ./pib unpacks (configs/devices/x86_64-softmmu/
# pib.mak, with --without-default-devices): what the fabric's guests and
# the user guide's examples use (q35, its PCIe root ports, virtio-net over
# vde, virtio-serial for the guest agent, ISA serial for the console, and
# for the libvirt example a virtio disk, balloon and XHCI controller), and
# the VM generation ID, which tells a guest restored from a snapshot that
# it is a copy, so that its kernel reseeds its random numbers, and
# virtio-9p, which shares a host directory with the guests (--share).
# A tree of the user's (--qemu-src) keeps QEMU's default set.
DEVICES_NAME = "pib"
DEVICES = """\
CONFIG_Q35=y
CONFIG_PCIE_PORT=y
CONFIG_VIRTIO_PCI=y
CONFIG_VIRTIO_NET=y
CONFIG_VIRTIO_SERIAL=y
CONFIG_VIRTIO_BLK=y
CONFIG_VIRTIO_BALLOON=y
CONFIG_USB_XHCI_PCI=y
CONFIG_ACPI_VMGENID=y
CONFIG_VIRTIO_9P=y
CONFIG_PIB_HCA=y
"""

# Bump when unpacking changes (the series' edits are re-applied each build).
PATCH_LEVEL = "5"

# Upstream QEMU's fixes since the pinned release that the fabric needs
# (each patch says what it fixes and where upstream has it). They go into
# the pinned tree only: a newer QEMU has them, a user's tree is the user's.
QEMU_FIXES = paths.REPO / "qemu-hw" / "qemu-fixes"

GLUE_SOURCES = ["pib-hca.c", "pib-hca-monitor.c"]


@dataclass(frozen=True)
class QemuTree:
    """A QEMU source tree the device is built into, and its build."""
    name: str  # what the cache calls it: qemu (the pinned one), qemu-newest
    tarball: sources.Tarball = None  # None: a tree of the user's
    user_src: Path = None

    @property
    def src(self) -> Path:
        return self.user_src or paths.cache_dir() / self.name / "src"

    @property
    def build(self) -> Path:
        return paths.cache_dir() / self.name / "build"

    @property
    def release(self) -> str:
        """10.0.2 of qemu_10.0.2+ds.orig.tar.xz"""
        return self.tarball.filename.split("_")[1].split("+")[0]

    @property
    def binary(self) -> Path:
        return self.build / "qemu-system-x86_64"


PINNED = QemuTree("qemu", sources.QEMU)
NEWEST = QemuTree("qemu-newest", sources.QEMU_NEWEST)
# ./pib setup --qemu-src DIR: the tree is remembered here until
# --qemu-src pinned; paths.qemu_binary() then names its build.
OWN_NAME = "qemu-own"
PINNED_WORD = "pinned"


def own_tree(src: Path) -> QemuTree:
    return QemuTree(OWN_NAME, user_src=src.resolve())


def selected() -> QemuTree:
    """The QEMU ./pib builds and runs: the pinned one, or the user's tree
    that ./pib setup --qemu-src chose."""
    chosen = paths.own_qemu_choice()
    return own_tree(Path(chosen.read_text().strip())) if chosen.is_file() else PINNED


def choose(src: str) -> None:
    """Remembers --qemu-src (a tree, or `pinned` to go back)."""
    chosen = paths.own_qemu_choice()
    if src == PINNED_WORD:
        chosen.unlink(missing_ok=True)
        return
    path = Path(src).resolve()
    if not (path / "configure").is_file() or not (path / "hw").is_dir():
        raise ui.StepFailed(f"--qemu-src {src}: not a QEMU source tree (no configure, no hw/)")
    chosen.parent.mkdir(parents=True, exist_ok=True)
    chosen.write_text(f"{path}\n")


def pinned_fixes(tree: QemuTree) -> list:
    """The patches of QEMU_FIXES that `tree` gets."""
    return sorted(QEMU_FIXES.glob("*.patch")) if tree.tarball == sources.QEMU else []


def upstream_status(patch: Path) -> str:
    """The first word of the patch's `Upstream-Status:` line: Backport (a
    fix upstream made after the pinned release) or Pending (ours, not in
    upstream yet)."""
    for line in patch.read_text().splitlines():
        if line.startswith("Upstream-Status:"):
            return line.split()[1] if len(line.split()) > 1 else ""
        if line.startswith("--- "):
            break
    return ""


def check_pinned_fixes() -> str:
    """The pinned tree carries every patch of QEMU_FIXES (each reverses
    cleanly); each says its upstream status, and the newest QEMU needs no
    backport (none applies): upstream has each, as its patch says. What
    the check saw is returned."""
    if not pinned_fixes(PINNED):
        raise ui.StepFailed(f"no patches in {QEMU_FIXES}")
    if not (NEWEST.src / "configure").is_file():
        raise ui.StepFailed(f"QEMU {NEWEST.release} is not unpacked in {NEWEST.src}")
    seen = {"Backport": [], "Pending": []}
    for patch in pinned_fixes(PINNED):
        status = upstream_status(patch)
        if status not in seen:
            raise ui.StepFailed(f"qemu-hw/qemu-fixes/{patch.name}: its Upstream-Status is "
                                f"'{status}', not Backport or Pending")
        if not _patch_applies(patch, PINNED.src, reverse=True):
            raise ui.StepFailed(f"the pinned QEMU's tree lacks qemu-hw/qemu-fixes/{patch.name}")
        if status == "Backport" and _patch_applies(patch, NEWEST.src, reverse=False):
            raise ui.StepFailed(f"qemu-hw/qemu-fixes/{patch.name} still applies to QEMU "
                                f"{NEWEST.release}: upstream does not have it")
        seen[status].append(patch.name[:4])
    return (f"backports {', '.join(seen['Backport']) or 'none'}, pending upstream "
            f"{', '.join(seen['Pending']) or 'none'}")


def _patch_applies(patch: Path, src: Path, reverse: bool) -> bool:
    proc = subprocess.run(["patch", "-p1", "--dry-run", "--batch", "--force",
                           *(["-R"] if reverse else []), "-i", patch, "-d", src],
                          capture_output=True, text=True)
    return proc.returncode == 0


def unpack(tree: QemuTree) -> None:
    tarball = sources.fetch(tree.tarball)
    key = f"{tree.tarball.sha256}:{PATCH_LEVEL}:{stamps.hash_files(pinned_fixes(tree))}"
    src = tree.src
    if stamps.is_current(f"{tree.name}-src", key) and src.is_dir():
        return
    ui.detail(f"unpacking the QEMU source ({tree.tarball.filename})")
    if src.exists():
        shutil.rmtree(src)
    if tree.build.exists():
        shutil.rmtree(tree.build)
    src.parent.mkdir(parents=True, exist_ok=True)
    tmp = src.parent / "unpack.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    ui.run_logged(["tar", "-xf", tarball, "-C", tmp], "qemu-build", "tar")
    (unpacked,) = list(tmp.iterdir())
    unpacked.rename(src)
    tmp.rmdir()
    _without_edk2_blobs(src)
    # The series a user applies (./pib qemu-patches), written against the
    # pinned QEMU; later builds only copy in what changed since.
    qemu_patches.apply_to(src, sources.fetch(sources.QEMU))
    qemu_patches.apply_series(pinned_fixes(tree), src)
    stamps.mark(f"{tree.name}-src", key)


def _without_edk2_blobs(src: Path) -> None:
    """Debian's +ds source trees have no edk2 firmware blobs, which QEMU's
    meson would unpack (x86_64 guests do not need them)."""
    if (src / "pc-bios" / "edk2-aarch64-code.fd.bz2").exists():
        return
    meson = src / "meson.build"
    text = meson.read_text()
    if "unpack_edk2_blobs = bzip2.found()" in text:
        ui.detail("no edk2 firmware blobs in the tree (a Debian +ds source): not unpacking them")
        meson.write_text(text.replace("unpack_edk2_blobs = bzip2.found()",
                                      "unpack_edk2_blobs = false"))


def _configure_flags(tree: QemuTree) -> list:
    """A tree ./pib unpacked gets only DEVICES (see _write_devices)."""
    if not tree.tarball:
        return CONFIGURE_FLAGS
    return [*CONFIGURE_FLAGS, "--without-default-devices",
            f"--with-devices-x86_64={DEVICES_NAME}"]


def _write_devices(tree: QemuTree) -> None:
    devices = tree.src / "configs" / "devices" / "x86_64-softmmu" / f"{DEVICES_NAME}.mak"
    if tree.tarball and (not devices.is_file() or devices.read_text() != DEVICES):
        devices.write_text(DEVICES)


def _build_inputs(tree: QemuTree, where: str = "") -> str:
    """What a build of `tree` (in `where`) is made of besides hw/pib's files."""
    return " ".join(_configure_flags(tree)) + DEVICES + PATCH_LEVEL + where + \
        (tree.tarball.sha256 if tree.tarball else "") + stamps.hash_files(pinned_fixes(tree))


def configure(tree: QemuTree) -> None:
    _write_devices(tree)
    flags = _configure_flags(tree)
    key = stamps.hash_files([], _build_inputs(tree, str(tree.src)))
    build = tree.build
    if stamps.is_current(f"{tree.name}-configure", key) and (build / "build.ninja").is_file():
        return
    if build.exists():
        shutil.rmtree(build)
    build.mkdir(parents=True)
    ui.detail("configuring QEMU")
    ui.run_logged([tree.src / "configure", *flags], "qemu-build", "configure", cwd=build)
    stamps.mark(f"{tree.name}-configure", key)


def _glue_entries(tree: QemuTree) -> list:
    """The compile_commands.json entries of our glue's sources."""
    db = json.loads((tree.build / "compile_commands.json").read_text())
    entries = []
    for name in GLUE_SOURCES:
        entry = next((e for e in db if e["file"].endswith(f"hw/pib/{name}")), None)
        if entry is None:
            raise ui.StepFailed(f"hw/pib/{name} is not in QEMU's compile_commands.json")
        entries.append(entry)
    return entries


def _strict_compile(entry: dict, source: str = None) -> subprocess.CompletedProcess:
    """The glue's compile command with -Werror, syntax only; with `source`
    given, that C text in place of the file."""
    args = shlex.split(entry["command"])
    out = args.index("-o")
    del args[out : out + 2]
    args += ["-Werror", "-fsyntax-only"]
    if source is not None:  # from stdin, its own includes found beside the file
        args[args.index(entry["file"])] = "-"
        here = (Path(entry["directory"]) / entry["file"]).parent
        args[1:1] = ["-x", "c", "-iquote", str(here)]
    return subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True,
                          input=source)


def check_glue_warnings(tree: QemuTree) -> None:
    """QEMU is built without -Werror, but our glue must be warning-free:
    recompile it alone with QEMU's own flags plus -Werror. A function the
    tree no longer declares is an implicit declaration, so an error."""
    for name, entry in zip(GLUE_SOURCES, _glue_entries(tree)):
        proc = _strict_compile(entry)
        if proc.returncode != 0:
            raise ui.StepFailed(f"warnings in qemu-hw/glue/{name}:\n{proc.stderr}")


def check_catches_api_break(tree: QemuTree) -> None:
    """The compile check itself can fail: the glue with a call to a QEMU
    function that does not exist (as after an upstream rename) is refused."""
    entry = _glue_entries(tree)[0]
    source = (Path(entry["directory"]) / entry["file"]).read_text()
    broken = source + "\nvoid pib_api_canary(void);\nvoid pib_api_canary(void)\n" \
                      "{\n    pci_register_bar_renamed_upstream(NULL, 0, 0, NULL);\n}\n"
    proc = _strict_compile(entry, broken)
    if proc.returncode == 0 or "pci_register_bar_renamed_upstream" not in proc.stderr:
        raise ui.StepFailed("the glue's compile check did not refuse a call to a function QEMU "
                            "lacks for that reason:\n" + proc.stderr[-2000:])


def build_objects(tree: QemuTree) -> None:
    """The series applied to `tree`, configured, and only the glue's
    objects compiled (with the headers the build generates for them) and
    checked with -Werror: what an upstream API change would break, without
    building a second emulator."""
    ui.step(f"QEMU {tree.release}: the series applied, configured, hw/pib compiled")
    unpack(tree)
    qemu_patches.sync(tree.src)
    configure(tree)
    objects = [e["output"] for e in _glue_entries(tree)]
    ui.run_logged(["ninja", "-C", tree.build, *objects], "qemu-build", "ninja (hw/pib objects)")
    check_glue_warnings(tree)


def _install_key(tree: QemuTree) -> str:
    """What a pinned QEMU binary is made of besides the checkout's sources
    (which name the source tree it is kept in)."""
    return stamps.hash_files([], _build_inputs(tree))


def build(tree: QemuTree = None) -> None:
    """Builds qemu-system-x86_64 with the device: a pinned QEMU from its
    tarball with hw/pib laid out from this checkout, kept in the
    checkout's source tree (paths.qemu_binary), or a tree of the user's,
    with the series applied unless it was already."""
    tree = tree or selected()
    installed = paths.qemu_binary()
    if tree.tarball:
        ui.step(f"QEMU {tree.release} with -device pib-hca")
        stamp = installed.with_name(installed.name + ".key")
        if installed.is_file() and stamp.is_file() and stamp.read_text() == _install_key(tree):
            ui.detail(f"built for these sources: {installed}")
            return
        unpack(tree)
        qemu_patches.sync(tree.src)
    else:
        ui.step(f"QEMU from {tree.src} with -device pib-hca")
        if not (tree.src / "configure").is_file():
            raise ui.StepFailed(f"{tree.src} is not a QEMU source tree (no configure)")
        _without_edk2_blobs(tree.src)
        if not qemu_patches.is_applied(tree.src):
            ui.detail(f"applying ./pib qemu-patches to {tree.src}")
            qemu_patches.apply_to(tree.src, sources.fetch(sources.QEMU))
    configure(tree)
    ui.detail("building qemu-system-x86_64 (about 3 minutes on 2 cores when cold)")
    ui.run_logged(["ninja", "-C", tree.build, "qemu-system-x86_64"], "qemu-build", "ninja")
    check_glue_warnings(tree)
    help_text = ui.run_quiet([tree.binary, "-device", "pib-hca,help"])
    if "node-guid" not in help_text:
        raise ui.StepFailed("the built QEMU does not list pib-hca's properties")
    if tree.tarball:
        source_tree.ensure()
        tmp = installed.with_name(installed.name + ".tmp")
        shutil.copy2(tree.binary, tmp)
        tmp.rename(installed)
        stamp.write_text(_install_key(tree))
    ui.detail(f"{installed}")
