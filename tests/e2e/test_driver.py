"""The guest driver: pib_0 registered from the device's own attributes."""

import time

import pytest

from guest_scripts import OBJECTS_SCRIPT
from pibctl.pairs import ipoib_up
from transfers import traffic

pytestmark = pytest.mark.errors_on_purpose(
    "driver reloads: each takes an ACTIVE link down (LinkDownedCounter)")


def _sysfs(ctx, vm, path):
    return ctx.run(vm, ["cat", f"/sys/class/infiniband/pib_0/{path}"]).out.strip()


def test_driver_registers_pib_0_with_device_attributes(ctx):
    for vm in ctx.fabric.vms:
        assert _sysfs(ctx, vm.name, "fw_ver") == "0.1.0"
        guid = f"{vm.node_guid:016x}"
        assert _sysfs(ctx, vm.name, "node_guid") == ":".join(guid[i:i + 4] for i in range(0, 16, 4))
        assert _sysfs(ctx, vm.name, "node_type").startswith("1: CA")
        assert _sysfs(ctx, vm.name, "node_desc") == f"{vm.name} pib_hca"
        # Cabled to the switch and configured by opensm.
        assert _sysfs(ctx, vm.name, "ports/1/state") == "4: ACTIVE"
        assert _sysfs(ctx, vm.name, "ports/1/phys_state") == "5: LinkUp"
        assert _sysfs(ctx, vm.name, "ports/1/gids/0") == "fe80:0000:0000:0000:" + ":".join(
            f"{vm.node_guid + 1:016x}"[i:i + 4] for i in range(0, 16, 4))
        assert _sysfs(ctx, vm.name, "ports/1/pkeys/0") == "0xffff"


def test_kernel_mad_layer_opened_qp0_and_qp1(ctx):
    qps = ctx.run("vm1", ["cat", "/sys/kernel/debug/pib/pib_0/qp"]).out.splitlines()
    states = {line.split()[1]: line.split()[3] for line in qps[1:]}
    assert states.get("0") == "RTS" and states.get("1") == "RTS", qps
    nodes = set(ctx.run("vm1", ["ls", "/dev/infiniband"]).out.split())
    assert {"issm0", "umad0", "uverbs0"} <= nodes, nodes


def test_driver_reloads_cleanly(ctx):
    # Exercise every kind of object first, so that leaks would show at unload
    # (the driver WARNs if a DMA buffer or pinned user ring is left).
    ctx.run("vm1", ["python3", "-"], stdin=OBJECTS_SCRIPT.encode())
    # The kernel log is never cleared (the log gate reads all of it): only
    # what the unload and the load said counts here.
    seen = len(ctx.run("vm1", ["dmesg"]).out.splitlines())
    ctx.sh("vm1", "modprobe -r pib && test ! -e /sys/class/infiniband/pib_0")
    ctx.sh("vm1", "modprobe pib && test -e /sys/class/infiniband/pib_0")
    dmesg = "\n".join(ctx.run("vm1", ["dmesg"]).out.splitlines()[seen:])
    for bad in ("WARNING", "BUG", "leak", "Oops", "timed out"):
        assert bad not in dmesg, dmesg
    qps = ctx.run("vm1", ["cat", "/sys/kernel/debug/pib/pib_0/qp"]).out
    assert " RTS " in qps, qps
    ctx.restart_sm()


# Errors test_device provokes on purpose.
PROVOKED = ("regs-bad-size", "regs-read-only", "regs-bad-offset", "regs-bad-reset")


def test_no_guest_errors_from_the_driver(ctx):
    for vm in ctx.vms:
        errors = [line for line in ctx.host_log(vm).splitlines()
                  if "pib-hca" in line and not any(p in line for p in PROVOKED)]
        assert not errors, "\n".join(errors[-20:])


# Unloads and loads of pib in a row, traffic before and after; many more
# in the soak (--soak): a teardown's races are rare, and the soak is where
# they are hunted.
RELOADS = 15
SOAK_RELOADS = 200
TRAFFIC = ["-t", "send,write,read,cas", "-s", "0,4097,65536", "-n", "2"]

# Holds pib_0 open from user space: a context, a PD, a CQ, an MR and a QP.
HOLDER_SCRIPT = r"""
import sys, time
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.cq import CQ
from pyverbs.mr import MR
from pyverbs.qp import QP, QPInitAttr, QPCap
import pyverbs.enums as e
ctx = Context(name="pib_0")
pd = PD(ctx)
cq = CQ(ctx, 16)
mr = MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))
print("ready", flush=True)
time.sleep(300)
"""


def _new_kernel_lines(ctx, vm, seen):
    return ctx.run(vm, ["dmesg"]).out.splitlines()[seen:]


def _reload_loop(ctx, reloads):
    traffic(ctx, TRAFFIC, port=18840)
    seen = len(ctx.run("vm1", ["dmesg"]).out.splitlines())
    start = time.monotonic()
    ctx.sh("vm1", f"for i in $(seq {reloads}); do modprobe -r pib || exit 1; "
                  "modprobe pib || exit 2; test -e /sys/class/infiniband/pib_0 || exit 3; done",
           timeout=900 + reloads * 5)
    took = time.monotonic() - start
    new = _new_kernel_lines(ctx, "vm1", seen)
    bad = [line for line in new if any(t in line for t in ("WARNING", "BUG", "leak", "Oops",
                                                           "timed out", "Call Trace"))]
    assert not bad, "\n".join(bad)
    ctx.restart_sm()  # each reload took the port from the SM
    ipoib_up(ctx, ["vm1"])
    traffic(ctx, TRAFFIC, port=18841)
    print(f"{reloads} unloads and loads of pib in {took:.0f} s, kernel log clean; "
          "pib-traffic bit-exact before and after")


def test_driver_reload_loop_with_traffic_before_and_after(ctx):
    """RELOADS of _reload_loop's reloads."""
    _reload_loop(ctx, RELOADS)


@pytest.mark.soak  # ./pib test --soak: the races of a driver's teardown are rare
def test_driver_reload_loop_soak(ctx):
    """SOAK_RELOADS of _reload_loop's reloads."""
    _reload_loop(ctx, SOAK_RELOADS)


def test_unload_with_an_open_user_context_is_refused_or_waits_never_breaks(ctx):
    ctx.run("vm1", ["sh", "-c", "cat > /tmp/holder.py"], stdin=HOLDER_SCRIPT.encode())
    ctx.sh("vm1", "rm -f /tmp/holder.out; (python3 /tmp/holder.py >/tmp/holder.out 2>&1 &)")
    deadline = time.monotonic() + 60
    while "ready" not in (ctx.run("vm1", ["cat", "/tmp/holder.out"], check=False).out or ""):
        assert time.monotonic() < deadline, ctx.run("vm1", ["cat", "/tmp/holder.out"]).out
        time.sleep(0.5)
    seen = len(ctx.run("vm1", ["dmesg"]).out.splitlines())
    # In the background: an unload the open context may block.
    ctx.sh("vm1", "rm -f /tmp/unload.rc; (modprobe -r pib >/tmp/unload.out 2>&1; "
                  "echo $? >/tmp/unload.rc) </dev/null >/dev/null 2>&1 &")
    # An unload that has not ended in 5 s waits for the context.
    deadline = time.monotonic() + 5
    while not (rc := ctx.run("vm1", ["cat", "/tmp/unload.rc"], check=False).out.strip()):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    said = ctx.run("vm1", ["cat", "/tmp/unload.out"], check=False).out.strip()
    if rc == "":
        outcome = "waits for the context to close"
    elif rc == "0":
        outcome = "disassociated the context"
    else:
        assert "in use" in said, f"modprobe -r exited {rc}: {said}"
        outcome = "refused: the module is in use"
    # [/]: the pattern must not match the command line of this shell, or of
    # the agent's `timeout` wrapper around the command.
    ctx.sh("vm1", "pkill -f '[/]tmp/holder.py'; true")
    deadline = time.monotonic() + 60
    while ctx.run("vm1", ["pgrep", "-f", "[/]tmp/holder.py"], check=False).exitcode == 0:
        assert time.monotonic() < deadline, "the holder did not exit"
        time.sleep(0.5)
    while rc == "" and not ctx.run("vm1", ["cat", "/tmp/unload.rc"], check=False).out.strip():
        assert time.monotonic() < deadline, "the unload still waits after the context closed"
        time.sleep(0.5)
    print(f"modprobe -r with a user context open: {outcome}")
    ctx.sh("vm1", "modprobe -r pib 2>/dev/null; modprobe pib && test -e /sys/class/infiniband/pib_0")
    new = _new_kernel_lines(ctx, "vm1", seen)
    bad = [line for line in new if any(t in line for t in ("WARNING", "BUG", "leak", "Oops",
                                                           "Call Trace"))]
    assert not bad, "\n".join(bad)
    ctx.restart_sm()
    ipoib_up(ctx, ["vm1"])
    traffic(ctx, TRAFFIC, port=18842)
