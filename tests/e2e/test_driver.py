"""The guest driver: pib_0 registered from the device's own attributes."""

from guest_scripts import OBJECTS_SCRIPT


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
