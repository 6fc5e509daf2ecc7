"""A fatal device error (docs/prm.md §2.2), injected from the host through
QMP (docs/prm.md §10): the guest's driver reports IB_EVENT_DEVICE_FATAL to
every user, kernel and user space, then resets the function and brings
the device back. The port is ACTIVE again, RC moves data bit-exact, and
IPoIB carries pings, all on the device that came back.

vm2 is the one that fails: vm1 runs opensm, which would lose its device."""

import re
import time

import pytest

from pibctl import fabric
from transfers import traffic

pytestmark = [
    pytest.mark.kernel_log_expected(
        "fatal device error (the device reports it); resetting the function"),
    pytest.mark.errors_on_purpose("a fatal device error takes the link down (LinkDownedCounter)"),
]

VM = "vm2"
RECOVERY_SECONDS = 60


def _registrations(ctx):
    """How often the driver has brought a device up since boot."""
    return len(re.findall(r"pib_\d+: node GUID", ctx.run(VM, ["dmesg"]).out))


def test_a_fatal_error_is_reported_and_recovered_by_a_function_reset(ctx):
    before = _registrations(ctx)
    # A user-space verbs consumer hears the event too.
    ctx.sh(VM, "rm -f /tmp/asyncwatch.out; "
               "(timeout 60 ibv_asyncwatch -d pib_0 > /tmp/asyncwatch.out 2>&1 &)")
    time.sleep(1)
    injected = ctx.pib("inject", VM, "fatal", "end-to-end test")
    assert injected.returncode == 0, injected.stderr
    injected = time.monotonic()
    deadline = injected + RECOVERY_SECONDS
    while _registrations(ctx) == before:
        assert time.monotonic() < deadline, (
            f"the device did not come back in {RECOVERY_SECONDS} s\n"
            + ctx.run(VM, ["dmesg"]).out[-3000:])
        time.sleep(1)
    print(f"  {VM}: pib_0 registered again {time.monotonic() - injected:.1f} s after the injection")
    log = ctx.run(VM, ["dmesg"]).out
    assert "fatal device error (the device reports it)" in log, log[-3000:]
    watch = ctx.run(VM, ["cat", "/tmp/asyncwatch.out"]).out
    print(f"  ibv_asyncwatch on {VM}: {watch.strip().splitlines()[-1] if watch.strip() else '-'}")
    assert "DEVICE_FATAL" in watch.upper().replace(" ", "_"), watch

    # The reset trained the link again (docs/prm.md §2.1): the switch
    # told opensm (Trap 128), which configures the port as a new one, by
    # itself.
    took = fabric.wait_active(ctx.fabric, timeout=60)
    print(f"  the device came back; every port ACTIVE {took:.1f} s later, opensm told by the "
          "switch's trap")
    # Data over RC on the device that came back, checked at both ends.
    traffic(ctx, ["-t", "send,write,read", "-s", "64K", "-n", "20"], port=18830)
    # IPoIB's interface is a new one: give it its address again, then ping.
    ctx.run(VM, ["pib-ipoib-up"])
    ctx.run("vm1", ["ping", "-c", "3", "-i", "0.2", "-W", "5", "vm2-ib"], timeout=60)
