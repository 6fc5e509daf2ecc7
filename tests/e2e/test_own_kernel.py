"""A kernel of the user's (./pib fabric up --kernel BZIMAGE --modules DIR):
these run on guests that boot the bundled kernel through that path, its
modules and tree laid out as `make modules_install` leaves a user's
(testing.bundled_kernel_as_users), so nothing new is built."""

import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from pibctl import own_kernel, paths
from pibctl.own_kernel import OwnKernel
from pibctl.pairs import run_pair

pytestmark = pytest.mark.own_kernel


def _given(ctx) -> OwnKernel:
    fab = ctx.fabric
    assert fab.kernel and fab.initrd, "the fabric was not booted with --kernel"
    install = paths.cache_dir() / "test-own-kernel"  # testing.bundled_kernel_as_users
    return OwnKernel(kernel=Path(fab.kernel), modules=install, driver=True)


def test_guests_run_the_given_kernel_with_our_driver_built_against_its_tree(ctx):
    own = _given(ctx)
    release = own_kernel.release_of(own.kernel)
    for vm in ctx.vms:
        cmdline = (ctx.fabric.vm(vm).path / "qemu.cmdline").read_text()
        assert f"-kernel {own.kernel} " in cmdline and f"-initrd {ctx.fabric.initrd} " in cmdline
        assert ctx.run(vm, ["uname", "-r"]).out.strip() == release
        where = ctx.run(vm, ["modinfo", "-n", "pib"]).out.strip()
        assert where == f"/lib/modules/{release}/updates/pib.ko", where
        assert re.search(r"^vermagic:\s+" + re.escape(release) + r" ",
                         ctx.run(vm, ["modinfo", "pib"]).out, re.M)
        assert "PORT_ACTIVE" in ctx.run(vm, ["ibv_devinfo", "-d", "pib_0"]).out


def test_data_crosses_the_fabric_checked(ctx):
    argv = ["ibv_rc_pingpong", "-s", "65536", "-n", "20", "-c", "-p", "18540"]
    client, server_out, rc = run_pair(ctx, argv, argv, port=18540)
    assert client.exitcode == 0 and rc == "0", (
        f"client {client.exitcode}, server {rc}\nclient:\n{client.out}{client.err}\n"
        f"server:\n{server_out}")
    assert re.search(r"^20 iters in", client.out, re.M), client.out


def _listing(initrd: Path) -> str:
    """The file names in the modules part of an initramfs we built."""
    cpio = initrd.parent / "modules.cpio.zst"
    return subprocess.run(f"zstd -dc {cpio} | cpio -t --quiet", shell=True, check=True,
                          capture_output=True, text=True).stdout


def test_no_driver_leaves_ours_out_and_keeps_the_rest(ctx):
    own = _given(ctx)
    release = own_kernel.release_of(own.kernel)
    with tempfile.TemporaryDirectory() as tmp:
        with_driver = _listing(own_kernel.initrd(own, Path(tmp) / "with"))
        without = _listing(own_kernel.initrd(OwnKernel(own.kernel, own.modules, driver=False),
                                             Path(tmp) / "without"))
    ours = f"usr/lib/modules/{release}/updates/pib.ko"
    assert ours in with_driver.split() and ours not in without.split()
    assert re.search(r"/ib_core\.ko", without), without


def test_what_is_not_a_kernel_or_module_tree_is_refused(ctx):
    own = _given(ctx)
    cases = []
    with tempfile.TemporaryDirectory() as tmp:
        junk = Path(tmp) / "junk"
        junk.write_bytes(b"\0" * 4096)
        cases.append((OwnKernel(junk, own.modules, True), "not an x86 bzImage"))
        cases.append((OwnKernel(own.kernel, Path(tmp), True), "no lib/modules/"))
        cases.append((OwnKernel(own.kernel, None, True), "needs --no-driver"))
        for bad, why in cases:
            try:
                own_kernel.initrd(bad, Path(tmp) / "out")
            except Exception as e:  # ui.StepFailed
                assert why in str(e), str(e)
            else:
                raise AssertionError(f"{bad} was accepted")


def test_the_documented_config_fragment_holds_for_the_bundled_kernel(ctx):
    """examples/own-kernel.config lists what a user's kernel needs: the
    kernel these guests booted must have all of it ("m" may be built in)."""
    own = _given(ctx)
    release = own_kernel.release_of(own.kernel)
    have = dict(re.findall(r"^(CONFIG_\w+)=(\S+)$",
                           (own.kernel.parent / f"config-{release}").read_text(), re.M))
    wanted = re.findall(r"^(CONFIG_\w+)=([ym])$",
                        (paths.REPO / "examples" / "own-kernel.config").read_text(), re.M)
    assert len(wanted) >= 30
    wrong = [f"{name}={value} (has {have.get(name, 'not set')})" for name, value in wanted
             if have.get(name) not in ({"y"} if value == "y" else {"y", "m"})]
    assert not wrong, wrong
