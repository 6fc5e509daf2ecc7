"""./pib package: Debian packages that install the driver and the provider
into guests of the user's own (Debian, Ubuntu; libvirt or not):

- pib-hca-dkms: the driver's source and a DKMS configuration, so that DKMS
  builds pib.ko for whatever kernel the guest runs and rebuilds it for
  each new one;
- pib-hca-provider-rdmavN: the provider for the rdma-core whose private
  ABI is N (34: rdma-core 56.1, trixie's; 65: rdma-core 65), with the
  libibverbs.d file that makes libibverbs load it.

Built with dpkg-deb from what ./pib setup built; nothing is installed on
the host."""

import re
import shutil
import tempfile
from pathlib import Path

from pibctl import paths, provider_build, ui

DRIVER_DIR = paths.REPO / "guest-driver"
DRIVER_HEADERS = [paths.REPO / "include" / "pib_hw.h", paths.REPO / "include" / "pib_user_abi.h"]
NAME = "pib-hca"
MAINTAINER = "pib-hca developers <pib-hca@localhost>"
# Debian's multiarch paths, where the distribution's rdma-core looks.
PROVIDER_DIR = "usr/lib/x86_64-linux-gnu/libibverbs"
DRIVER_FILE = "etc/libibverbs.d/pib.driver"
# What each provider build needs of the distribution's libibverbs1.
LIBIBVERBS_RANGE = {"34": ("56.1", "57~"), "65": ("65.0", "66~")}


def version() -> str:
    """The package version: the hardware interface's (pib_hw.h)."""
    text = (paths.REPO / "include" / "pib_hw.h").read_text()
    found = re.search(r"#define PIB_IF_VERSION_CURRENT PIB_IF_VERSION\((\d+), (\d+)\)", text)
    if not found:
        raise ui.StepFailed("include/pib_hw.h has no PIB_IF_VERSION_CURRENT")
    return f"{found.group(1)}.{found.group(2)}"


DKMS_CONF = """\
PACKAGE_NAME="{name}"
PACKAGE_VERSION="{version}"
BUILT_MODULE_NAME[0]="pib"
DEST_MODULE_LOCATION[0]="/updates/dkms"
# No BTF for the module: pahole need not be installed.
MAKE[0]="make -C ${{kernel_source_dir}} M=${{dkms_tree}}/${{PACKAGE_NAME}}/${{PACKAGE_VERSION}}/build CONFIG_DEBUG_INFO_BTF_MODULES= modules"
CLEAN="make -C ${{kernel_source_dir}} M=${{dkms_tree}}/${{PACKAGE_NAME}}/${{PACKAGE_VERSION}}/build clean"
AUTOINSTALL="yes"
"""

DKMS_POSTINST = """\
#!/bin/sh
# Builds and installs pib.ko for the installed kernels that have headers.
set -e
if [ "$1" = configure ]; then
    /usr/lib/dkms/common.postinst {name} {version} "" "" "$2"
fi
"""

DKMS_PRERM = """\
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = upgrade ] || [ "$1" = deconfigure ]; then
    dkms remove -m {name} -v {version} --all || true
fi
"""


def _control(package: str, arch: str, section: str, depends: str, description: str,
             extra: str = "") -> str:
    return (f"Package: {package}\nVersion: {version()}-1\nArchitecture: {arch}\n"
            f"Maintainer: {MAINTAINER}\nDepends: {depends}\n{extra}Section: {section}\n"
            f"Priority: optional\nDescription: {description}\n")


def _build_deb(staging: Path, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    staging.chmod(0o755)  # the package's / (a temporary directory is 0700)
    control = (staging / "DEBIAN" / "control").read_text()
    package = re.search(r"^Package: (\S+)$", control, re.M).group(1)
    arch = re.search(r"^Architecture: (\S+)$", control, re.M).group(1)
    deb = out / f"{package}_{version()}-1_{arch}.deb"
    ui.run_logged(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", staging, deb], "package",
                  f"dpkg-deb {deb.name}")
    return deb


def dkms_package(out: Path) -> Path:
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp)
        src = staging / "usr" / "src" / f"{NAME}-{version()}"
        (src / "include").mkdir(parents=True)
        for f in DRIVER_DIR.iterdir():
            if f.is_file() and not f.name.startswith("."):
                shutil.copy2(f, src / f.name)
        for h in DRIVER_HEADERS:
            shutil.copy2(h, src / "include" / h.name)
        (src / "dkms.conf").write_text(DKMS_CONF.format(name=NAME, version=version()))
        debian = staging / "DEBIAN"
        debian.mkdir()
        (debian / "control").write_text(_control(
            f"{NAME}-dkms", "all", "kernel", "dkms (>= 3), make, kmod",
            "pib-hca InfiniBand HCA driver (DKMS source)\n"
            " The guest kernel driver of pib-hca, the emulated InfiniBand host channel\n"
            " adapter for QEMU (-device pib-hca). DKMS builds it for every installed\n"
            " kernel whose headers are installed."))
        for script, text in (("postinst", DKMS_POSTINST), ("prerm", DKMS_PRERM)):
            (debian / script).write_text(text.format(name=NAME, version=version()))
            (debian / script).chmod(0o755)
        return _build_deb(staging, out)


def provider_package(rc: provider_build.RdmaCore, out: Path) -> Path:
    library = provider_build.build(rc)
    low, high = LIBIBVERBS_RANGE[rc.pabi]
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp)
        (staging / PROVIDER_DIR).mkdir(parents=True)
        shutil.copy2(library, staging / PROVIDER_DIR / library.name)
        (staging / DRIVER_FILE).parent.mkdir(parents=True)
        (staging / DRIVER_FILE).write_text("driver pib\n")
        (staging / "DEBIAN").mkdir()
        (staging / "DEBIAN" / "control").write_text(_control(
            f"{NAME}-provider-rdmav{rc.pabi}", "amd64", "libs",
            f"libibverbs1 (>= {low}), libibverbs1 (<< {high}), libc6",
            f"pib-hca user-space verbs provider for rdma-core {rc.version}\n"
            " The rdma-core provider of pib-hca, the emulated InfiniBand host channel\n"
            f" adapter for QEMU: libibverbs (private ABI {rc.pabi}) loads it for pib devices.",
            extra=f"Provides: {NAME}-provider\nConflicts: {NAME}-provider\n"
                  f"Replaces: {NAME}-provider\n"))
        (staging / "DEBIAN" / "conffiles").write_text(f"/{DRIVER_FILE}\n")
        return _build_deb(staging, out)


def build_all(out: Path) -> list:
    ui.step(f"Debian packages (version {version()}-1) in {out}")
    debs = [dkms_package(out)]
    for rc in (provider_build.GUEST, provider_build.NEWEST):
        debs.append(provider_package(rc, out))
    for deb in debs:
        ui.detail(str(deb))
    return debs
