"""Trap 128: a switch tells the SM at once when one of its links changes
(IBA 14.2.5.1, 14.3.9), so opensm re-sweeps without waiting for its next
periodic sweep. Needs a second switch whose links can go away."""

import re
import time

import pytest

from pibctl import fabric

pytestmark = [
    pytest.mark.only_two_switches,
    pytest.mark.errors_on_purpose("a switch is stopped: the links to it go down (LinkDownedCounter)"),
]


def _trap_count(ctx, lid):
    log = ctx.run("vm1", ["cat", "/run/opensm.log"]).out
    return len(re.findall(rf"num:128 \(Link state change\).* from LID:{lid} ", log))


def test_a_link_change_traps_to_opensm(ctx):
    home = ctx.fabric.vms[0].switch
    other = next(s.name for s in ctx.fabric.topo.switches if s.name != home)
    out = ctx.run("vm1", ["smpquery", "-D", "portinfo", "0,1", "0"]).out
    home_lid = int(re.search(r"^Lid:\.+(\d+)", out, re.M).group(1))
    before = _trap_count(ctx, home_lid)

    fabric.stop_switch(ctx.fabric, other)  # the home switch's links to it go down
    deadline = time.monotonic() + 20
    while _trap_count(ctx, home_lid) == before:
        assert time.monotonic() < deadline, "opensm logged no Trap 128 from " + home
        time.sleep(1)
    print(f"Trap 128 from {home} (LID {home_lid}) reached opensm")
    time.sleep(2)  # one trap per link: let the others arrive
    after_down = _trap_count(ctx, home_lid)

    start = time.monotonic()
    fabric.start_switch(ctx.fabric, other)
    fabric.wait_active(ctx.fabric, timeout=120)
    print(f"all ports ACTIVE again {time.monotonic() - start:.0f} s after {other} restarted")
    # The links came back up: the home switch trapped again.
    assert _trap_count(ctx, home_lid) > after_down
