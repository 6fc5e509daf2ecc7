"""The guest kernel driver: built against the guest kernel's headers, which
are unpacked from Debian's packages into the cache (never installed on the
host), in a build directory outside the clone."""

import shutil
import tempfile
from pathlib import Path

from pibctl import buildroot, paths, sources, stamps, ui

DRIVER_DIR = paths.REPO / "guest-driver"
SHARED_HEADERS = [paths.REPO / "include" / "pib_hw.h", paths.REPO / "include" / "pib_user_abi.h"]


def other_kernels():
    """The kernels the driver must also build against, besides the one
    the guests run (sources.GUEST_KERNELS): ./pib test compiles it for each."""
    return [k for k in sources.GUEST_KERNELS if k != sources.selected_kernel()]


def _headers_root(release: str) -> Path:
    return paths.cache_dir() / "kernel-headers" / release


def resolve_release(meta: str, suite: str) -> str:
    """The kernel release (say 6.1.0-50-amd64) whose headers `meta` in
    `suite` depends on."""
    out = ui.run_quiet(["apt-cache", "depends", f"{meta}/{suite}"])
    for line in out.splitlines():
        name = line.split(":", 1)[-1].strip()
        if line.strip().startswith("Depends:") and name.startswith("linux-headers-"):
            return name.removeprefix("linux-headers-")
    raise ui.StepFailed(f"cannot resolve {meta} in {suite}: {out.strip()}")


def _header_packages(release: str, suite: str):
    """linux-headers-RELEASE and the common headers and kbuild it needs
    (their names differ between Debian's kernel series)."""
    out = ui.run_quiet(["apt-cache", "depends", f"linux-headers-{release}/{suite}"])
    deps = [line.split(":", 1)[1].strip() for line in out.splitlines()
            if line.strip().startswith("Depends:")]
    wanted = [d for d in deps if d.startswith("linux-kbuild-") or
              (d.startswith("linux-headers-") and d.endswith("-common"))]
    if len(wanted) != 2:
        raise ui.StepFailed(f"linux-headers-{release} in {suite}: unexpected dependencies {deps}")
    return [f"linux-headers-{release}", *wanted]


def fetch_headers(release: str, suite: str = "") -> Path:
    """Returns the kernel build directory (KDIR) for `release` of `suite`
    (by default the selected guest kernel's)."""
    suite = suite or sources.kernel_suite()
    root = _headers_root(release)
    kdir = root / "usr" / "src" / f"linux-headers-{release}"
    stamp = f"kernel-headers-{release}"
    if stamps.is_current(stamp, release) and (kdir / "Makefile").is_file():
        return kdir
    packages = _header_packages(release, suite)
    ui.detail(f"kernel headers {release}: downloading")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with tempfile.TemporaryDirectory(dir=sources.downloads()) as tmp:
        ui.run_logged(["apt-get", "download", *[f"{p}/{suite}" for p in packages]],
                      "driver", "apt-get download", cwd=tmp)
        for deb in sorted(Path(tmp).glob("*.deb")):
            ui.run_logged(["dpkg-deb", "-x", deb, root], "driver", "unpacking headers")
    # The arch package's Makefile includes the common one by absolute path.
    common = next(p for p in packages if p.endswith("-common"))
    (kdir / "Makefile").write_text(f"include {root / 'usr' / 'src' / common / 'Makefile'}\n")
    stamps.mark(stamp, release)
    return kdir


def _copy_sources(build_dir: Path) -> None:
    if build_dir.exists():
        shutil.rmtree(build_dir)
    shutil.copytree(DRIVER_DIR, build_dir)
    (build_dir / "include").mkdir()
    for h in SHARED_HEADERS:
        shutil.copy2(h, build_dir / "include" / h.name)


# No pahole here: build without BTF; the module loads the same.
def _make_argv(kdir, build_dir) -> list:
    return ["make", "-C", kdir, f"M={build_dir}", "CONFIG_DEBUG_INFO_BTF_MODULES=", "-j2",
            "modules"]


def _make(kdir: Path, build_dir: Path, what: str) -> None:
    _copy_sources(build_dir)
    ui.run_logged(_make_argv(kdir, build_dir), "driver", what)


def _build_latest(what: str) -> Path:
    """Builds pib.ko in the trixie build root against the newest kernel's
    headers there; returns its path (in the root)."""
    root = buildroot.ensure()
    release = buildroot.kernel_release()
    inside = Path("/build/guest-driver")
    _copy_sources(root / inside.relative_to("/"))
    buildroot.run(_make_argv(f"/usr/src/linux-headers-{release}", inside), "driver",
                  f"{what} for {release} (trixie build root)")
    return root / inside.relative_to("/") / "pib.ko"


def compile_check(name: str) -> str:
    """Builds pib.ko against kernel `name`'s headers (warnings are errors,
    as in the Kbuild); returns the kernel release it built for."""
    if name == sources.LATEST:
        _build_latest("building pib.ko")
        return buildroot.kernel_release()
    suite = sources.kernel_suite(name)
    release = resolve_release("linux-headers-amd64", suite)
    kdir = fetch_headers(release, suite)
    _make(kdir, paths.cache_dir() / "build" / f"guest-driver-{name}",
          f"building pib.ko for {release}")
    return release


def build_against(tree: Path, release: str) -> Path:
    """Builds pib.ko against a kernel build tree of the user's (./pib
    fabric up --kernel --modules); returns its path."""
    build_dir = paths.cache_dir() / "build" / "guest-driver-own"
    ko = build_dir / "pib.ko"
    sources_ = [p for p in DRIVER_DIR.iterdir() if p.is_file()] + SHARED_HEADERS
    symvers = tree / "Module.symvers"
    key = stamps.hash_files(sources_ + ([symvers] if symvers.is_file() else []),
                            f"{tree}:{release}")
    if stamps.is_current("guest-driver-own", key) and ko.is_file():
        ui.detail("guest driver for your kernel: up to date")
        return ko
    _make(tree, build_dir, f"building pib.ko against {tree}")
    stamps.mark("guest-driver-own", key)
    ui.detail(f"guest driver for your kernel: built against {tree}")
    return ko


def build(release: str) -> Path:
    """Builds pib.ko for `release` (the selected guest kernel's); returns
    its path."""
    build_dir = paths.cache_dir() / "build" / "guest-driver"
    ko = build_dir / "pib.ko"
    sources_ = [p for p in DRIVER_DIR.iterdir() if p.is_file()] + SHARED_HEADERS
    key = stamps.hash_files(sources_, release)
    if stamps.is_current("guest-driver", key) and ko.is_file():
        ui.detail("guest driver: up to date")
        return ko
    if sources.selected_kernel() == sources.LATEST:
        build_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(_build_latest("building pib.ko"), ko)
    else:
        _make(fetch_headers(release), build_dir, "building pib.ko")
    stamps.mark("guest-driver", key)
    ui.detail(f"guest driver: {ko}")
    return ko
