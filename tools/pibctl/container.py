"""./pib container: pib-hca set up in a container image, so that a CI
host of any Linux (Ubuntu, Fedora, Debian) with podman or docker runs
./pib run with nothing else installed.

Made of Debian's packages only, and no registry: the root is
debootstrap's bookworm (the host ./pib is made for) with what running a
fabric takes (RUNTIME_PACKAGES, and the packages of the libraries that
the QEMU and the switch setup built link against, which ldd finds),
then this checkout's files and, from the cache, that QEMU, that switch
and the guest image. `podman import` makes the image from the root.

In the image ./pib is the entry point, the cache is CACHE, and --accel
defaults to auto: KVM when the container was given /dev/kvm, else TCG."""

import os
import resource
import shlex
import shutil
import subprocess
from pathlib import Path

from pibctl import hostdeps, image, paths, setup, source_tree, stamps, ui

NAME = "localhost/pib-hca"
SUITE = "bookworm"
MIRROR = image.MIRROR
REPO = "/opt/pib-hca"  # the checkout, in the image
CACHE = "/var/cache/pib-hca"  # PIB_CACHE, in the image
# What ./pib run needs beside the binaries' libraries: Python for ./pib,
# the management network's switch, QEMU's firmware, ssh-keygen for the
# guests' keys (guest_ssh.py) and dmesg (util-linux is in every root).
RUNTIME_PACKAGES = ("python3", "vde2", "seabios", "qemu-system-data", "openssh-client")
# The host's tools: podman, and runc, which runs containers on hosts
# whose cgroup hierarchy crun refuses (v1 and v2 mounted together).
HOST_PACKAGES = {"podman": None, "runc": None}


def _libraries_packages(binaries) -> list:
    """The Debian packages of the shared libraries `binaries` load."""
    libs = set()
    for binary in binaries:
        out = subprocess.run(["ldd", str(binary)], check=True, capture_output=True,
                             text=True).stdout
        for line in out.splitlines():
            if "=> /" in line:
                libs.add(line.split("=>")[1].split("(")[0].strip())
    packages, unowned = set(), []
    for lib in sorted(libs):
        owner = _owner(lib)
        if owner:
            packages.add(owner)
        else:
            unowned.append(lib)
    if unowned:
        raise ui.StepFailed(f"no Debian package has {', '.join(unowned)}, which "
                            f"{', '.join(b.name for b in binaries)} load")
    return sorted(packages)


def _owner(lib: str) -> str:
    """The package that installed `lib`, by any of its names: its own, the
    file it links to, and each with and without /usr (bookworm's merged
    /usr: dpkg may know /lib/x86_64-linux-gnu/libc.so.6 alone)."""
    names = []
    for path in (lib, os.path.realpath(lib)):
        bare = path.removeprefix("/usr")
        names += [bare, "/usr" + bare]
    for name in dict.fromkeys(names):
        found = subprocess.run(["dpkg", "-S", name], capture_output=True, text=True)
        if found.returncode == 0:
            return found.stdout.split(":")[0].split(",")[0].strip()
    return ""


def _base(packages: list) -> Path:
    """debootstrap's bookworm with `packages`, made once per list (by one
    ./pib at a time: ./pib test's host lane makes it ahead of the test
    that builds the image)."""
    with paths.cache_lock("container-base"):
        return _base_locked(packages)


def _base_locked(packages: list) -> Path:
    base = paths.cache_dir() / "container" / "base"
    key = stamps.hash_files([], f"{SUITE}:{','.join(packages)}:{','.join(image.TRIM)}")
    if stamps.is_current("container-base", key) and base.is_dir():
        ui.detail("base: cached")
        return base
    if base.exists():
        shutil.rmtree(base)
    ui.detail(f"base: debootstrap {SUITE} with {len(packages)} packages (about a minute)")
    ui.run_logged(["debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
                   SUITE, base, MIRROR], "container", "debootstrap")
    image.trim(base)
    stamps.mark("container-base", key)
    return base


def _checkout_files() -> list:
    """The checkout's files, as git lists them (untracked ones too, but
    not those it ignores)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                              "--exclude-standard"], cwd=paths.REPO, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ui.StepFailed(f"./pib container packs the checkout's files as git lists them: "
                            f"{e}") from None
    return [Path(p.decode()) for p in out.split(b"\0") if p and (paths.REPO / p.decode()).is_file()]


def _root(base: Path, binaries: list, files: list) -> Path:
    """The image's root: the base (hard links to it: nothing in it is
    written), the checkout in REPO, and in CACHE the binaries and the
    guest image, where the checkout's ./pib looks for them (hard links
    into the cache, not copies)."""
    root = paths.cache_dir() / "container" / "root"
    if root.exists():
        shutil.rmtree(root)
    subprocess.run(["cp", "-al", str(base), str(root)], check=True)
    repo = root / REPO.lstrip("/")
    for rel in files:
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(paths.REPO / rel, repo / rel)
    if source_tree.key(repo) != source_tree.key(paths.REPO):
        raise ui.StepFailed("the checkout has files under the build's inputs that git ignores: "
                            "the image's ./pib would look for binaries built without them")
    cache = paths.cache_dir()
    for path in [*binaries, paths.kernel_image(), paths.initrd_image()]:
        dest = root / CACHE.lstrip("/") / path.relative_to(cache)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.link(path, dest)
    return root


def _import(root: Path, tag: str) -> None:
    changes = [f"ENV PIB_CACHE={CACHE}", "ENV PIB_ACCEL=auto", f"WORKDIR {REPO}",
               f'ENTRYPOINT ["{REPO}/pib"]', 'CMD ["--help"]']
    tar = ["tar", "--numeric-owner", "-c", "-C", str(root), "."]
    podman = ["podman", "import", *[a for c in changes for a in ("--change", c)], "-", tag]
    ui.run_logged(["bash", "-c", f"set -o pipefail; {shlex.join(tar)} | {shlex.join(podman)}"],
                  "container", "podman import")


def size_mb(tag: str) -> float:
    out = subprocess.run(["podman", "image", "inspect", "--format", "{{.Size}}", tag],
                         check=True, capture_output=True, text=True).stdout
    return int(out.strip()) / 1e6


def _packages(binaries: list) -> list:
    return sorted(set(RUNTIME_PACKAGES) | set(_libraries_packages(binaries)))


def prepare_base() -> None:
    """The image's base, ahead of build(): podman and debootstrap's root,
    the minute of a build that takes no CPU to speak of (./pib test's host
    lane makes it while the guests run). Setup must have run."""
    hostdeps.ensure_also(HOST_PACKAGES, "the container image")
    _base(_packages([paths.qemu_binary(), paths.fabric_switch_binary()]))


def build(output: Path = None) -> str:
    """Builds the image (setting up first, as ./pib setup does), unless
    one of the same content is there; returns its name. `output`: also
    saved there as an archive `podman load` and `docker load` take."""
    if paths.own_qemu_choice().is_file():
        raise ui.StepFailed("./pib container packs the pinned QEMU, and ./pib setup --qemu-src "
                            "chose a tree of yours: ./pib setup --qemu-src pinned first")
    setup.run()
    ui.step("Container image")
    hostdeps.ensure_also(HOST_PACKAGES, "the container image")
    binaries = [paths.qemu_binary(), paths.fabric_switch_binary()]
    packages = _packages(binaries)
    files = _checkout_files()
    content = [*(paths.REPO / f for f in files), *binaries, paths.kernel_image(),
               paths.initrd_image()]
    tag = f"{NAME}:{stamps.hash_files(content, ','.join(packages))[:16]}"
    # One build at a time: ./pib test's host lane makes the image ahead of
    # the test that makes it again (and finds it there).
    with paths.cache_lock("container-image"):
        if _exists(tag):
            ui.detail(f"{tag}: up to date")
        else:
            root = _root(_base(packages), binaries, files)
            _import(root, tag)
            shutil.rmtree(root)
    subprocess.run(["podman", "tag", tag, f"{NAME}:latest"], check=True)
    _remove_others(tag)
    ui.detail(f"{tag} (also {NAME}:latest): {size_mb(tag):.0f} MB")
    if output:
        ui.run_logged(["podman", "save", "--format", "docker-archive", "-o", output, tag],
                      "container", "podman save")
        ui.detail(f"saved to {output} ({output.stat().st_size / 1e6:.0f} MB)")
    return tag


def _exists(tag: str) -> bool:
    return subprocess.run(["podman", "image", "exists", tag]).returncode == 0


def _remove_others(tag: str) -> None:
    """The images of earlier builds go: each is as big as this one."""
    listed = subprocess.run(["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", NAME],
                            check=True, capture_output=True, text=True).stdout.split()
    others = [t for t in listed if t not in (tag, f"{NAME}:latest")]
    if others:
        subprocess.run(["podman", "rmi", *others], check=True, capture_output=True)


def podman_run_options() -> list:
    """What `podman run` needs on this host beyond its defaults. podman
    raises a container's limits of open files and processes above the
    caller's, which a host that withholds CAP_SYS_RESOURCE refuses: the
    container gets the caller's (its processes at most pid_max, beyond
    which such a host refuses the limit too). crun refuses a host whose
    cgroup v1 and v2 hierarchies are mounted together; runc runs there."""
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if nofile == resource.RLIM_INFINITY:
        nofile = 1 << 20
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        pid_max = nproc
    nproc = pid_max if nproc == resource.RLIM_INFINITY else min(nproc, pid_max)
    options = ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    if not Path("/sys/fs/cgroup/cgroup.controllers").is_file() and shutil.which("runc"):
        options = ["--runtime", "runc", *options]
    return options
