"""Ports cabled to the fabric switch: link training, and surviving a switch
restart without rebooting the guests."""

import re
import time

from pibctl import fabric


def _port_states(ctx, vm):
    out = ctx.run(vm, ["ibv_devinfo", "-d", "pib_0"]).out
    state = re.search(r"state:\s*(\S+)", out).group(1)
    phys = ctx.run(vm, ["cat", "/sys/class/infiniband/pib_0/ports/1/phys_state"]).out.strip()
    return state, phys


def _wait_states(ctx, want_state, want_phys, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        states = {vm: _port_states(ctx, vm) for vm in ctx.vms}
        if all(s == want_state and want_phys in p for s, p in states.values()):
            return states
        assert time.monotonic() < deadline, f"ports did not reach {want_state}: {states}"
        time.sleep(1)


def test_ports_are_active_through_the_switch(ctx):
    _wait_states(ctx, "PORT_ACTIVE", "LinkUp")
    for vm in ctx.fabric.vms:
        log = ctx.fabric.switch_log(vm.switch).read_text()
        assert f"port {vm.switch_port}: link up" in log, log


def test_links_come_back_after_a_switch_restart(ctx):
    fabric.stop_ib_switch(ctx.fabric)
    _wait_states(ctx, "PORT_DOWN", "Polling")
    start = time.monotonic()
    fabric.start_ib_switches(ctx.fabric)
    # QEMU reconnects each port's chardev on its own (reconnect-ms), and
    # opensm's sweeps find and configure the new switch.
    _wait_states(ctx, "PORT_ACTIVE", "LinkUp", timeout=120)
    print(f"ports ACTIVE again {time.monotonic() - start:.0f} s after the switch restarted")
