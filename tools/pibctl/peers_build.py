"""The peers' suites that ./pib test --peers runs and that the guests'
packages do not carry, built once into the cache (peers_dir()), which
every guest of the campaign mounts at the same path (share.py):

- libfabric's fabtests, from the source of the libfabric the guests have
  (trixie's 2.1.0), built in a trixie root against its libfabric-dev, so
  that they run on the guests' own libfabric1 and its verbs provider;
- UCX's gtest, from the newest UCX source Debian's mirror has with its
  tests (bookworm's 1.13.1), configured as UCX's developers configure it
  (contrib/configure-devel --enable-gtest) with verbs, rdma_cm and mlx5
  DV, on the host: the gtest binary runs on the UCX of its own build tree.
"""

import os
import shutil
import subprocess
from pathlib import Path

from pibctl import buildroot, hostdeps, paths, sources, stamps, ui

# What building fabtests takes in the trixie root, beside its base.
FABTESTS_ROOT_PACKAGES = ["g++", "make", "autoconf", "automake", "libtool", "pkg-config",
                          "libfabric-dev"]
# What building UCX takes on the host (Debian 12).
UCX_HOST_PACKAGES = {p: None for p in ("autoconf", "automake", "libtool", "patch", "g++", "make",
                                       "pkg-config", "libibverbs-dev", "librdmacm-dev",
                                       "libnuma-dev")}
UCX_CONFIGURE = ["--enable-gtest", "--with-verbs", "--with-rdmacm", "--with-mlx5-dv",
                 "--without-java", "--without-go", "--disable-doxygen-doc"]
# configure-devel builds with -Werror; Debian 12's GCC then refuses
# test/gtest/ucm/malloc_hook.cc, which compares a pointer it freed with
# the ranges it expects (what the test is for), as a use after free. The
# exception goes into GTEST_CXXFLAGS, which only the gtest compiles use
# (after -Werror; -fno-tree-vectorize is what configure put there): the
# top-level make builds test/gtest too (--enable-gtest puts it in
# SUBDIRS), and a CXXFLAGS on make's command line would replace what
# Makefiles add to it (libucxperf's "CXXFLAGS += -nostdlib ...").
UCX_MAKE = ["GTEST_CXXFLAGS=-fno-tree-vectorize -Wno-error=use-after-free"]



def peers_dir() -> Path:
    d = paths.cache_dir() / "peers"
    d.mkdir(parents=True, exist_ok=True)
    return d


def fabtests() -> Path:
    """The installed fabtests (bin/, share/fabtests/ with the providers'
    exclude lists), built once."""
    prefix = peers_dir() / "fabtests"
    key = stamps.hash_files([], f"{sources.LIBFABRIC.sha256}:{','.join(FABTESTS_ROOT_PACKAGES)}")
    if stamps.is_current("peers-fabtests", key) and (prefix / "bin" / "fi_msg").is_file():
        return prefix
    ui.step(f"fabtests from {sources.LIBFABRIC.filename}, in a trixie root (once)")
    tarball = sources.fetch(sources.LIBFABRIC)
    root = _fabtests_root()
    build = root / "build"
    if build.exists():
        shutil.rmtree(build)
    build.mkdir()
    ui.run_logged(["tar", "xf", tarball, "-C", build, "--strip-components=1",
                   "--wildcards", "*/fabtests/*"], "peers", "unpacking fabtests")
    script = ("cd /build/fabtests && ./autogen.sh && ./configure --prefix=/opt/fabtests && "
              "make -j$(nproc) && rm -rf /opt/fabtests && make install")
    buildroot.run_in(root, ["sh", "-c", script], "peers", "building fabtests (about a minute)")
    if prefix.exists():
        shutil.rmtree(prefix)
    shutil.copytree(root / "opt" / "fabtests", prefix, symlinks=True)
    shutil.rmtree(build)
    stamps.mark("peers-fabtests", key)
    return prefix


def _fabtests_root() -> Path:
    """The trixie root with what building fabtests takes, made once."""
    root = paths.cache_dir() / "buildroot" / "trixie-peers"
    key = ",".join(FABTESTS_ROOT_PACKAGES)
    if stamps.is_current("peers-root", key) and root.is_dir():
        return root
    if root.exists():
        shutil.rmtree(root)
    buildroot.copy_root(buildroot.ensure_base(), root)
    buildroot.run_in(root, ["apt-get", "install", "-y", "-q", "--no-install-recommends",
                            *FABTESTS_ROOT_PACKAGES], "peers", "the trixie root's compilers")
    buildroot.run_in(root, ["apt-get", "clean"], "peers", "apt-get clean")
    stamps.mark("peers-root", key)
    return root


def ucx_gtest() -> Path:
    """UCX's build tree, its gtest (test/gtest/gtest) built, once."""
    tree = peers_dir() / "ucx"
    build = tree / "build"
    gtest = build / "test" / "gtest" / "gtest"
    key = stamps.hash_files([], f"{sources.UCX.sha256}:{sources.UCX_DEBIAN.sha256}:"
                                f"{' '.join(UCX_CONFIGURE + UCX_MAKE)}")
    if stamps.is_current("peers-ucx", key) and gtest.is_file():
        return build
    ui.step(f"UCX's gtest from {sources.UCX.filename} (once; some 60 minutes on 2 cores)")
    hostdeps.ensure_also(UCX_HOST_PACKAGES, "building UCX's gtest")
    if tree.exists():
        shutil.rmtree(tree)
    tree.mkdir()
    ui.run_logged(["tar", "xf", sources.fetch(sources.UCX), "-C", tree, "--strip-components=1"],
                  "peers", "unpacking UCX")
    ui.run_logged(["tar", "xf", sources.fetch(sources.UCX_DEBIAN), "-C", tree], "peers",
                  "unpacking its Debian packaging")
    _apply_debian_patches(tree)
    ui.run_logged(["./autogen.sh"], "peers", "UCX: autogen.sh", cwd=tree)
    build.mkdir()
    ui.run_logged(["../contrib/configure-devel", f"--prefix={tree / 'install'}", *UCX_CONFIGURE],
                  "peers", "UCX: configure-devel", cwd=build)
    jobs = f"-j{len(os.sched_getaffinity(0))}"
    ui.run_logged(["make", jobs, *UCX_MAKE], "peers", "UCX: make", cwd=build)
    ui.run_logged(["make", jobs, "-C", "test/gtest", *UCX_MAKE, "gtest"], "peers",
                  "UCX: make gtest", cwd=build)
    stamps.mark("peers-ucx", key)
    return build


def _apply_debian_patches(tree: Path) -> None:
    """debian/patches/series applied in order, as dpkg-source would."""
    series = tree / "debian" / "patches" / "series"
    for line in series.read_text().splitlines():
        name = line.split("#", 1)[0].strip()
        if name:
            with open(tree / "debian" / "patches" / name) as patch:
                subprocess.run(["patch", "-p1", "-s"], cwd=tree, stdin=patch, check=True)
