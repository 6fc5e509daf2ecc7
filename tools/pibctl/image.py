"""The guest image: a trixie userspace, the guest kernel and our files,
packed as one initramfs that the guest runs from (no disk).

The initramfs is three concatenated cpio archives, each cached on its own
(compressed) so that changing our files does not redo debootstrap:
  base    - debootstrap of guest/packages.txt, trimmed      (slow, rare)
  modules - the guest kernel's modules from guest/modules.txt and our
            driver (per kernel and driver change)
  overlay - guest/rootfs/, the rdma-core provider and the programs we
            build for the guest (every change)
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from pibctl import (driver_build, mpi_build, paths, provider_build, sources, stamps,
                    traffic_build, ui)

GUEST = paths.REPO / "guest"
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"

# Paths removed from the base image: documentation, translations and
# package-manager state are never used in a guest that lives in RAM.
TRIM = [
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "usr/share/bash-completion",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf/templates.dat-old",
]
# Kept inside the trimmed trees: copyright files are part of the packages.
KEEP_SUFFIX = "copyright"
# Documentation that is needed: pyverbs ships its test suite there.
KEEP_DOC = ["usr/share/doc/rdma-core"]
# Programs for the guests are built against these (mpi_build.py).
MPI_DEV_PACKAGES = ["libopenmpi-dev", "libmpich-dev"]


def _list_file(name: str):
    lines = (GUEST / name).read_text().splitlines()
    return [w for w in (l.split("#", 1)[0].strip() for l in lines) if w]


def _pack(root: Path, out: Path, label: str) -> None:
    """Packs root into a zstd-compressed newc cpio archive owned by root."""
    tmp = out.with_suffix(".tmp")
    cmd = (
        "set -o pipefail; find . -mindepth 1 | LC_ALL=C sort | "
        "cpio --quiet -o -H newc -R 0:0 | zstd -q -T0 -6 -f -o " + str(tmp)
    )
    ui.run_logged(["bash", "-c", cmd], "image", label, cwd=root)
    tmp.rename(out)


def trim(root: Path) -> None:
    """Removes what a root filesystem need not carry (TRIM), but the
    packages' copyright files."""
    keep = [root / k for k in KEEP_DOC]
    for rel in TRIM:
        target = root / rel
        if not target.exists():
            continue
        for path in sorted(target.rglob("*"), reverse=True):
            if any(path == k or k in path.parents for k in keep):
                continue
            if path.is_dir() and not path.is_symlink():
                try:
                    path.rmdir()
                except OSError:
                    pass
            elif path.name != KEEP_SUFFIX:
                path.unlink()


def _leave_out(rootfs: Path) -> None:
    """Removes what guest/leave-out.txt names: packages nothing of ours
    uses that the wanted ones depend on, and files."""
    names = _list_file("leave-out.txt")
    packages = [n for n in names if not n.startswith("/")]
    installed = subprocess.run(
        ["chroot", rootfs, "dpkg-query", "-W", "-f", "${Package} ${Status}\n"],
        check=True, capture_output=True, text=True).stdout
    present = {line.split()[0] for line in installed.splitlines() if line.endswith(" installed")}
    purge = [p for p in packages if p in present]
    if purge:
        ui.run_logged(["chroot", rootfs, "dpkg", "--purge", "--force-depends", *purge],
                      "image", f"leaving out {len(purge)} packages")
    for pattern in (n for n in names if n.startswith("/")):
        for path in rootfs.glob(pattern.lstrip("/")):
            path.unlink()


def _save_mpi_sdk(rootfs: Path) -> None:
    """What building a program for the image's two MPIs takes: the headers
    of their -dev packages (same versions as the libraries installed) and
    the libraries themselves to link against (mpi_build.py)."""
    sdk = paths.mpi_sdk_dir()
    if sdk.exists():
        shutil.rmtree(sdk)
    debs = rootfs / "tmp" / "mpi-dev"
    debs.mkdir()
    (sdk / "root").mkdir(parents=True)
    ui.run_logged(["chroot", rootfs, "sh", "-c", "cd /tmp/mpi-dev && apt-get download "
                   + " ".join(MPI_DEV_PACKAGES)], "image", "the MPIs' headers (apt-get download)")
    for deb in sorted(debs.glob("*.deb")):
        ui.run_logged(["dpkg-deb", "-x", deb, sdk / "root"], "image", f"unpacking {deb.name}")
    lib = rootfs / "usr/lib/x86_64-linux-gnu"
    (sdk / "lib").mkdir()
    for name in mpi_build.LIBRARIES:
        shutil.copy2(lib / name, sdk / "lib" / name)  # follows the soname's link
    shutil.rmtree(debs)


def _base_key() -> str:
    # Keyed on what goes into it, not on this file: editing the packing
    # logic elsewhere must not redo debootstrap.
    return stamps.hash_files([], f"{SUITE}:{','.join(_list_file('packages.txt'))}:"
                                 f"{','.join(TRIM)}:{KEEP_DOC}:"
                                 f"{','.join(_list_file('leave-out.txt'))}:"
                                 f"{','.join(MPI_DEV_PACKAGES)}")


def _base_cached(out: Path) -> bool:
    return (stamps.is_current("image-base", _base_key()) and out.is_file()
            and paths.mpi_sdk_dir().is_dir())


class BaseBeside:
    """build_base() in a process of its own, started before setup's
    compiles: debootstrap mostly waits on the network, the compiles on the
    CPU, so a cold setup overlaps them. build() waits for it."""

    def __init__(self):
        self.output = paths.logs_dir() / "image-base.out"
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.time()
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "from pibctl import image; image.build_base()"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(paths.REPO / "tools")})

    @staticmethod
    def start():
        """A BaseBeside, or None when the base is cached."""
        return None if _base_cached(paths.image_dir() / "base.cpio.zst") else BaseBeside()

    def wait(self) -> Path:
        """The base it built."""
        if self.proc.poll() is None:
            ui.detail("base userspace: waiting for the debootstrap started beside the compiles")
        rc = self.proc.wait()
        if rc != 0:
            tail = "\n".join(self.output.read_text(errors="replace").splitlines()[-20:])
            raise ui.StepFailed(f"the base userspace, built beside the compiles, failed "
                                f"(exit {rc}; {self.output}):\n{tail}")
        out = paths.image_dir() / "base.cpio.zst"
        if not _base_cached(out):
            raise ui.StepFailed(f"the base userspace built beside the compiles is not in {out}")
        took = self.output.stat().st_mtime - self.started  # its last line's time
        ui.detail(f"base userspace: built beside the compiles in {took:.0f} s")
        return out

    def stop(self) -> None:
        """Ends it if it still runs (setup failed before build())."""
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def build_base() -> Path:
    out = paths.image_dir() / "base.cpio.zst"
    packages = _list_file("packages.txt")
    key = _base_key()
    if _base_cached(out):
        ui.detail("base userspace: cached")
        return out
    rootfs = paths.image_dir() / "rootfs"
    if rootfs.exists():
        shutil.rmtree(rootfs)
    ui.detail(f"base userspace: debootstrap {SUITE} with {len(packages)} packages (about a minute)")
    ui.run_logged(
        ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}", SUITE, rootfs, MIRROR],
        "image",
        "debootstrap",
    )
    _leave_out(rootfs)
    _save_mpi_sdk(rootfs)
    trim(rootfs)
    megabytes = int(subprocess.run(["du", "-sm", rootfs], check=True, capture_output=True,
                                   text=True).stdout.split()[0])
    _pack(rootfs, out, "packing the base userspace")
    ui.detail(f"base userspace: {megabytes} MB unpacked, {out.stat().st_size / 1e6:.0f} MB packed")
    shutil.rmtree(rootfs)
    stamps.mark("image-base", key)
    return out


def _module_closure(moddir: Path, wanted, missing=None):
    """Module files (relative to moddir) of `wanted` and all they depend on.
    A module the kernel has neither as a module nor built in is an error,
    or, given a `missing` list, is added to it."""
    deps = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        path, _, rest = line.partition(":")
        deps[path] = rest.split()
    by_name = {}
    for path in deps:
        name = Path(path).name.split(".ko")[0].replace("-", "_")
        by_name[name] = path
    # Built in to one kernel, a module in another (virtio_pci: 6.12, 6.1).
    builtin = {Path(line).name.split(".ko")[0].replace("-", "_")
               for line in (moddir / "modules.builtin").read_text().splitlines()}
    todo = []
    for name in wanted:
        # "name?": a module some kernels no longer have (crc32_generic
        # became part of the crc32 library in 6.14).
        optional = name.endswith("?")
        key = name.removesuffix("?").replace("-", "_")
        if key in builtin or (optional and key not in by_name):
            continue
        if key not in by_name:
            if missing is None:
                raise ui.StepFailed(f"guest/modules.txt names {name}, which this kernel does not have")
            missing.append(key)
            continue
        todo.append(by_name[key])
    closure = set()
    while todo:
        path = todo.pop()
        if path not in closure:
            closure.add(path)
            todo.extend(deps[path])
    return sorted(closure)


def build_modules(release: str, kernel_root: Path, extra_modules, out: Path = None,
                  missing=None) -> Path:
    """The kernel's modules from guest/modules.txt plus ours (`extra_modules`,
    installed under updates/), with modules.dep covering all of them, packed
    into `out` (by default the bundled kernel's part of the image). With a
    `missing` list, modules the kernel lacks are listed there, not refused."""
    out = out or paths.image_dir() / f"modules-{release}.cpio.zst"
    wanted = _list_file("modules.txt")
    src = kernel_root / "lib" / "modules" / release
    key = stamps.hash_files([Path(__file__), GUEST / "modules.txt", src / "modules.dep",
                             *extra_modules], release)
    # A kernel of the user's is packed afresh each time (a few seconds).
    cached = missing is None
    if cached and stamps.is_current("image-modules", key) and out.is_file():
        ui.detail(f"kernel modules {release}: cached")
        return out
    staging = out.parent / "modules-staging"
    if staging.exists():
        shutil.rmtree(staging)
    # trixie has a merged /usr: /lib is a symlink, so modules go to usr/lib.
    dest = staging / "usr" / "lib" / "modules" / release
    files = _module_closure(src, wanted, missing)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / rel, dest / rel)
    for ko in extra_modules:
        (dest / "updates").mkdir(parents=True, exist_ok=True)
        shutil.copy2(ko, dest / "updates" / ko.name)
    for meta in ("modules.order", "modules.builtin", "modules.builtin.modinfo"):
        if (src / meta).is_file():
            shutil.copy2(src / meta, dest / meta)
    ui.run_logged(["depmod", "-b", staging / "usr", release], "image", "depmod")
    _pack(staging, out, "packing kernel modules")
    shutil.rmtree(staging)
    ui.detail(f"kernel modules {release}: {len(files)} modules")
    if cached:
        stamps.mark("image-modules", key)
    return out


# Where the provider goes in the guest, and how libibverbs finds it.
PROVIDER_DIR = "usr/lib/x86_64-linux-gnu/libibverbs"
PROVIDER_CONFIG = "etc/libibverbs.d/pib.driver"


# Where the programs we build for the guest go.
PROGRAM_DIR = "usr/local/bin"


def build_overlay(provider: Path, newest_provider: Path, programs) -> Path:
    out = paths.image_dir() / "overlay.cpio.zst"
    root = GUEST / "rootfs"
    key = stamps.hash_tree(root, stamps.hash_files([provider, newest_provider, *programs]))
    if stamps.is_current("image-overlay", key) and out.is_file():
        return out
    staging = paths.image_dir() / "overlay-staging"
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(root, staging, symlinks=True)
    (staging / PROVIDER_DIR).mkdir(parents=True, exist_ok=True)
    shutil.copy2(provider, staging / PROVIDER_DIR / provider.name)
    (staging / PROVIDER_CONFIG).parent.mkdir(parents=True, exist_ok=True)
    (staging / PROVIDER_CONFIG).write_text("driver pib\n")
    for program in programs:
        shutil.copy2(program, staging / PROGRAM_DIR / program.name)
    provider_build.install_newest(staging, newest_provider)
    _pack(staging, out, "packing our guest files")
    shutil.rmtree(staging)
    stamps.mark("image-overlay", key)
    return out


def build(beside: BaseBeside = None) -> None:
    kernel = sources.selected_kernel()
    ui.step(f"Guest image (trixie userspace, Linux {kernel} from {sources.kernel_suite()})")
    paths.image_dir().mkdir(parents=True, exist_ok=True)
    release, kernel_root = sources.fetch_guest_kernel()
    driver = driver_build.build(release)
    provider = provider_build.build()
    newest_provider = provider_build.build(provider_build.NEWEST)
    # Before the MPI programs: they build against its MPIs.
    base = beside.wait() if beside else build_base()
    programs = [traffic_build.build(), *mpi_build.build()]
    parts = [base, build_modules(release, kernel_root, [driver]),
             build_overlay(provider, newest_provider, programs)]
    concatenate(parts, paths.initrd_image())
    shutil.copy2(kernel_root / "boot" / f"vmlinuz-{release}", paths.kernel_image())
    size_mb = paths.initrd_image().stat().st_size / 1e6
    ui.detail(f"kernel {release}; initramfs {size_mb:.0f} MB at {paths.initrd_image()}")


def userspace_parts() -> list:
    """The image's parts that do not depend on the kernel (built by setup)."""
    return [paths.image_dir() / "base.cpio.zst", paths.image_dir() / "overlay.cpio.zst"]


def concatenate(parts, initrd: Path) -> None:
    """The initramfs: the kernel unpacks concatenated cpio archives in turn.
    The parts are cached compressed, the initramfs is not: under TCG, a
    guest's kernel took 13 s of its boot to decompress and unpack the
    compressed one (104 MB), 4.4 s to unpack this (367 MB)."""
    tmp = initrd.with_suffix(".tmp")
    with open(tmp, "wb") as out:
        subprocess.run(["zstd", "-q", "-d", "-c", *map(str, parts)], stdout=out, check=True)
    tmp.rename(initrd)
