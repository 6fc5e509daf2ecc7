"""Host packages: Debian's archive only, backports pinned per package."""

import os
import subprocess
from pathlib import Path

from pibctl import paths, ui

SOURCES_FILE = Path("/etc/apt/sources.list.d/pib-hca.sources")

# bookworm-backports for meson/pycotap (QEMU 10 needs meson >= 1.5), the
# guest kernel and QEMU's source; trixie's and sid's source lists for
# rdma-core 56.1 and 65. Only deb-src for those: the host must never
# install their binaries. sid's Release file carries a Valid-Until date a
# mirror that lags behind passes (apt-get update then fails with "Release
# file ... is expired"); what setup takes from those lists is a source
# tarball whose SHA-256 sources.py pins, so their age does not matter.
SOURCES = """\
# Written by pib-hca's ./pib setup.
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
Check-Valid-Until: no
"""

# Package -> the release to take it from (None: the host's default).
PACKAGES = {
    # Building QEMU.
    "build-essential": None,
    "pkg-config": None,
    "ninja-build": None,
    "meson": "bookworm-backports",
    "python3-pycotap": "bookworm-backports",
    "python3-venv": None,
    "libglib2.0-dev": None,
    "libpixman-1-dev": None,
    "libslirp-dev": None,
    "libfdt-dev": None,
    "libvdeplug-dev": None,
    "flex": None,
    "bison": None,
    "xz-utils": None,
    # The newest QEMU's +ds tarball has no prebuilt device trees: its meson
    # wants dtc to make them (./pib test builds that QEMU too).
    "device-tree-compiler": None,
    # Building and checking our own code.
    "g++": None,
    "catch2": None,
    "clang-format": None,
    # Each content of the sources builds in a tree of its own
    # (source_tree.py): ccache makes a new tree cost only what changed.
    "ccache": None,
    # The fuzzers: clang with libFuzzer and the sanitizer runtimes.
    "clang": None,
    "libclang-rt-dev": None,
    # ./pib fuzz's coverage report: llvm-profdata, llvm-cov, llvm-cxxfilt.
    "llvm": None,
    # Building the rdma-core provider.
    "cmake": None,
    "libnl-3-dev": None,
    "libnl-route-3-dev": None,
    # pib-traffic, the guests' checked-transfer program: SHA-256.
    "libssl-dev": None,
    # Packet captures (libpcap writes them, tshark checks them in the tests).
    "libpcap-dev": None,
    "tshark": None,
    # The device's state as JSON for QEMU's monitor (header-only).
    "nlohmann-json3-dev": None,
    # Running guests: firmware and the management-network switch.
    "seabios": None,
    "qemu-system-data": None,
    "vde2": None,
    # Building the guest image.
    "debootstrap": None,
    "debian-archive-keyring": None,
    "cpio": None,
    "zstd": None,
    "kmod": None,
    # The ssh keys ./pib fabric up makes for the guests (MPI's launchers).
    "openssh-client": None,
    # Checking examples/libvirt: virt-xml-validate (and the xmllint it runs).
    "libvirt-clients": None,
    "libxml2-utils": None,
    "ca-certificates": None,
    # A crashed QEMU's backtrace in the failure report (crash_report.py).
    "gdb": None,
    # The end-to-end suite's runner (tests/e2e/conftest.py), and its limit
    # on each test's time (pytest.ini).
    "python3-pytest": None,
    "python3-pytest-timeout": None,
    # Our Python's lint (testing.check_python).
    "python3-pyflakes": None,
    # Reading the CI examples (examples/ci/*.yml) in their test.
    "python3-yaml": None,
}

# Minimum versions where the default release is too old.
MIN_VERSIONS = {"meson": "1.5"}


def _installed_version(pkg: str):
    proc = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}\t${Version}", pkg], capture_output=True, text=True
    )
    if proc.returncode != 0 or not proc.stdout.startswith("install ok installed"):
        return None
    return proc.stdout.split("\t", 1)[1]


def _version_ok(pkg: str, version: str) -> bool:
    minimum = MIN_VERSIONS.get(pkg)
    if not minimum:
        return True
    return subprocess.run(["dpkg", "--compare-versions", version, "ge", minimum]).returncode == 0


def _write_sources() -> bool:
    if SOURCES_FILE.is_file() and SOURCES_FILE.read_text() == SOURCES:
        return False
    SOURCES_FILE.write_text(SOURCES)
    return True


def ensure() -> None:
    ui.step("Host packages")
    _install(PACKAGES)


def ensure_also(packages: dict, why: str) -> None:
    """Installs `packages` (as PACKAGES) that one command needs beyond
    what setup installs."""
    ui.detail(f"host packages for {why}")
    _install(packages)


def _install(packages: dict) -> None:
    if os.geteuid() != 0:
        raise ui.StepFailed("./pib installs Debian packages and must run as root")
    # Two lanes of ./pib test may install at once (the host lane's
    # container base beside a pass's test): apt's own lock would refuse
    # the second, so they take turns.
    with paths.cache_lock("host-packages"):
        _install_locked(packages)


def _install_locked(packages: dict) -> None:
    changed_sources = _write_sources()
    missing = []
    for pkg, release in packages.items():
        version = _installed_version(pkg)
        if version is None or not _version_ok(pkg, version):
            missing.append(f"{pkg}/{release}" if release else pkg)
    if changed_sources or missing:
        ui.detail("apt-get update")
        ui.run_logged(["apt-get", "update", "-q"], "apt", "apt-get update")
    if missing:
        ui.detail(f"installing {len(missing)} packages: {' '.join(missing)}")
        ui.run_logged(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
            "apt",
            "apt-get install",
            env={"DEBIAN_FRONTEND": "noninteractive"},
        )
    else:
        ui.detail("all present")
