"""The pib-hca PCIe function as a guest sees it, before any driver loads."""

import contextlib
import json
import re
from pathlib import Path

import pytest

PCI_ID = "1234:1b1b"


# Bad register accesses test_bad_accesses_are_logged_as_guest_errors makes
# on purpose (and the reset test's bad reset value): the log gate expects them.
pytestmark = [
    pytest.mark.guest_errors_expected("regs-bad-size", "regs-read-only", "regs-bad-offset",
                                      "regs-bad-reset"),
    pytest.mark.errors_on_purpose("the device is reset with its link ACTIVE: LinkDownedCounter, "
                                  "and what the switch had for the port meanwhile is discarded"),
]


def test_lspci_shows_class_ids_bars_and_msix(ctx):
    out = ctx.run("vm1", ["lspci", "-nn", "-vv", "-d", PCI_ID]).out
    assert re.search(r"Infiniband controller \[0207\]", out, re.I), out
    assert f"[{PCI_ID}] (rev 01)" in out, out
    assert re.search(r"Subsystem: .*\[1234:0001\]", out), out
    assert re.search(r"Region 0: Memory at \S+ \(64-bit, non-prefetchable\) \[size=4K\]", out), out
    assert re.search(r"Region 2: Memory at \S+ \(64-bit, non-prefetchable\) \[size=4M\]", out), out
    assert re.search(r"Region 4: Memory at \S+ .*\[size=4K\]", out), out
    assert re.search(r"MSI-X: Enable. Count=16 Masked.", out), out
    assert re.search(r"Vector table: BAR=4 offset=00000000", out), out
    assert "Express (v2) Endpoint" in out, out


@contextlib.contextmanager
def driver_unloaded(ctx, vm="vm1"):
    """Register pokes need the function to themselves: no driver bound."""
    ctx.run(vm, ["modprobe", "-r", "pib"])
    try:
        yield
    finally:
        ctx.run(vm, ["modprobe", "pib"])
        ctx.restart_sm()


def _regs(ctx, vm="vm1"):
    return json.loads(ctx.run(vm, ["pib-regs", "json"]).out)


def _interface_version():
    """PIB_IF_VERSION_CURRENT, as include/pib_hw.h defines it."""
    text = (Path(__file__).resolve().parents[2] / "include/pib_hw.h").read_text()
    major, minor = re.search(r"PIB_IF_VERSION_CURRENT PIB_IF_VERSION\((\d+), (\d+)\)", text).groups()
    return int(major) << 16 | int(minor)


def test_identification_registers_read_through_sysfs(ctx):
    for vm in ctx.fabric.vms:
        with driver_unloaded(ctx, vm.name):
            regs = _regs(ctx, vm.name)
        assert regs["ID"] == 0x48424950, regs
        assert regs["IF_VERSION"] == _interface_version(), regs
        assert regs["FW_VERSION"] == 0x00010000, regs
        assert regs["STATUS"] & 1, regs
        guid = regs["NODE_GUID_HI"] << 32 | regs["NODE_GUID_LO"]
        assert guid == vm.node_guid, (hex(guid), hex(vm.node_guid))
        assert regs["NUM_DOORBELL_PAGES"] == 1024, regs
        assert regs["NUM_MSIX_VECTORS"] == 16, regs
        assert regs["NUM_PORTS"] == 1, regs


def test_scratch_register_and_reset(ctx):
    with driver_unloaded(ctx):
        _scratch_and_reset(ctx)


def _scratch_and_reset(ctx):
    ctx.run("vm1", ["pib-regs", "write", "0x18", "0xcafef00d"])
    assert ctx.run("vm1", ["pib-regs", "read", "0x18"]).out.strip() == "0xcafef00d"
    # A reset without the magic value is refused...
    ctx.run("vm1", ["pib-regs", "write", "0x10", "1"])
    assert ctx.run("vm1", ["pib-regs", "read", "0x18"]).out.strip() == "0xcafef00d"
    # ...with it, the device returns to its power-on state.
    ctx.run("vm1", ["pib-regs", "write", "0x10", "0x52534554"])
    assert ctx.run("vm1", ["pib-regs", "read", "0x18"]).out.strip() == "0x00000000"
    assert _regs(ctx)["ID"] == 0x48424950


def test_bad_accesses_are_logged_as_guest_errors(ctx):
    with driver_unloaded(ctx):
        _bad_accesses(ctx)


def _bad_accesses(ctx):
    # A byte read of a 32-bit register reads as 0 and is reported on the host.
    assert ctx.run("vm1", ["pib-regs", "read", "0x0", "--width", "1"]).out.strip() == "0x00"
    ctx.run("vm1", ["pib-regs", "write", "0x0", "0"])
    ctx.run("vm1", ["pib-regs", "write", "0x200", "0"])
    log = ctx.host_log("vm1")
    assert "pib-hca hca0: regs-bad-size: read of 1 bytes at 0x0" in log, log[-2000:]
    assert "pib-hca hca0: regs-read-only: write of 0x00000000 to read-only register 0x0" in log, log[-2000:]
    assert "pib-hca hca0: regs-bad-offset: write of 0x00000000 to undefined register 0x200" in log, log[-2000:]
    # The device keeps working after bad input.
    assert _regs(ctx)["ID"] == 0x48424950
