"""A trixie build root (debootstrap, kept in the cache) for what a Debian 12
host cannot build itself: the driver against the newest kernel Debian
offers (trixie-backports), whose headers' tools are trixie binaries and
whose compiler is trixie's gcc-14, which both need a newer glibc than
bookworm's. Nothing of it is installed on the host."""

import contextlib
import shutil
import subprocess
from pathlib import Path

from pibctl import paths, stamps, ui

SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
# One stock trixie root, made once, serves every check that needs one
# (package_root.py installs ./pib package's packages into copies of it,
# as a user would: DKMS, the stock kernel's headers, rdma-core); the build
# root is a copy of it with the newest kernel's headers added.
BASE_PACKAGES = ["gcc-14", "make", "libc6-dev", "dkms", "linux-headers-amd64", "libibverbs1",
                 "ibverbs-utils"]
# Where the newest kernel's headers come from, and the package naming them.
BACKPORTS = "trixie-backports"
HEADERS_META = "linux-headers-amd64"
BACKPORTS_SOURCES = f"""\
Types: deb
URIs: {MIRROR}
Suites: {BACKPORTS}
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


def root() -> Path:
    return paths.cache_dir() / "buildroot" / SUITE


def base() -> Path:
    """The stock root: trixie with BASE_PACKAGES."""
    return paths.cache_dir() / "buildroot" / f"{SUITE}-base"


def copy_root(source: Path, dest: Path) -> Path:
    """A copy of a root at `dest` (which must not exist)."""
    subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(dest)], check=True)
    return dest


@contextlib.contextmanager
def _proc_mounted(at: Path):
    """/proc inside the root while a command runs (objtool reads it)."""
    proc = at / "proc"
    proc.mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(proc)], check=True)
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(proc)], check=False)


CHROOT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
              "LC_ALL": "C.UTF-8"}


def run_in(where: Path, argv, log_name: str, label: str) -> None:
    """Runs argv inside a debootstrapped root (as root, in a chroot)."""
    with _proc_mounted(where):
        ui.run_logged(["chroot", where, *argv], log_name, label, env=CHROOT_ENV)


def output_in(where: Path, argv) -> subprocess.CompletedProcess:
    """Runs argv inside a root; returns it finished, output captured."""
    with _proc_mounted(where):
        return subprocess.run(["chroot", str(where), *map(str, argv)], capture_output=True,
                              text=True, errors="replace", env=CHROOT_ENV)


def run(argv, log_name: str, label: str) -> None:
    """Runs argv inside the build root."""
    run_in(root(), argv, log_name, label)


def ensure_base() -> Path:
    """The stock root: made once (a few minutes), then cached."""
    key = stamps.hash_files([], f"{SUITE}:{','.join(BASE_PACKAGES)}:{BACKPORTS}")
    if stamps.is_current("trixie-base", key) and (base() / "usr/sbin/dkms").is_file():
        return base()
    if base().exists():
        shutil.rmtree(base())
    base().parent.mkdir(parents=True, exist_ok=True)
    ui.detail(f"trixie root: debootstrap {SUITE} with {', '.join(BASE_PACKAGES)} "
              "(two to three minutes)")
    ui.run_logged(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
                   SUITE, base(), MIRROR], "buildroot", "debootstrap")
    (base() / "etc/apt/sources.list.d/backports.sources").write_text(BACKPORTS_SOURCES)
    run_in(base(), ["apt-get", "update", "-q"], "buildroot", "apt-get update")
    run_in(base(), ["apt-get", "clean"], "buildroot", "apt-get clean")
    stamps.mark("trixie-base", key)
    return base()


def ensure() -> Path:
    """The build root: the stock root with the newest kernel's headers
    added, made once, then cached. Delete it to pick up a newer kernel."""
    key = stamps.hash_files([], f"{SUITE}:{','.join(BASE_PACKAGES)}:{BACKPORTS}:{HEADERS_META}")
    if stamps.is_current("buildroot", key) and kernel_release(check=False):
        return root()
    ensure_base()
    if root().exists():
        shutil.rmtree(root())
    copy_root(base(), root())
    ui.detail(f"build root: the trixie root with {HEADERS_META} from {BACKPORTS}")
    run(["apt-get", "install", "-y", "-q", "--no-install-recommends", f"{HEADERS_META}/{BACKPORTS}"],
        "buildroot", f"apt-get install {HEADERS_META}")
    kernel_release()
    stamps.mark("buildroot", key)
    return root()


# The packages a kernel of the newest series is split into (its image
# package only depends on the binary, the modules and their base files).
KERNEL_PARTS = ["linux-image", "linux-binary", "linux-modules", "linux-base"]


def download_kernel_image(dest: Path) -> list:
    """Downloads the kernel whose headers the root holds (trixie-backports'
    linux-image-RELEASE and the packages it is split into) into `dest`;
    returns the .debs. The host's apt does not know trixie-backports; the
    root's does."""
    release = kernel_release()
    inside = Path("/build/kernel-image")
    where = root() / inside.relative_to("/")
    if where.exists():
        shutil.rmtree(where)
    where.mkdir(parents=True)
    with _proc_mounted(root()):
        present = [f"{part}-{release}" for part in KERNEL_PARTS
                   if subprocess.run(["chroot", str(root()), "apt-cache", "show",
                                      f"{part}-{release}"], capture_output=True).returncode == 0]
    run(["sh", "-c", f"cd {inside} && apt-get download {' '.join(present)}"], "kernel",
        f"apt-get download {', '.join(present)} (trixie build root)")
    debs = sorted(where.glob("*.deb"))
    if len(debs) != len(present):
        raise ui.StepFailed(f"apt-get download {' '.join(present)} produced {len(debs)} files")
    dest.mkdir(parents=True, exist_ok=True)
    out = []
    for deb in debs:
        out.append(dest / deb.name)
        shutil.move(deb, out[-1])
    return out


def kernel_release(check: bool = True) -> str:
    """The newest release whose headers the build root holds (say
    7.3.4+deb13-amd64; it holds the stock kernel's too)."""
    found = sorted((p.name.removeprefix("linux-headers-")
                    for p in (root() / "usr" / "src").glob("linux-headers-*-amd64")),
                   key=_version_key)
    if not found:
        if check:
            raise ui.StepFailed("the build root holds headers for no kernel")
        return ""
    return found[-1]


def _version_key(release: str):
    """6.12.57+deb13-amd64 -> (6, 12, 57): orders kernel releases."""
    numbers = release.split("+")[0].split("-")[0].split(".")
    return tuple(int(n) if n.isdigit() else 0 for n in numbers)
