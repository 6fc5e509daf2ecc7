"""Live migration (docs/migration.md, issue 33): vm1 moves to a new QEMU
process on this host (./pib fabric migrate) in the middle of RC traffic
with vm2, there and back: pib-traffic checks every byte of WRITEs, READs,
SENDs and atomics at both ends, no QP goes to error, and the switch keeps
vm1's link up (the port ACTIVE with its LID). A migration to a QEMU
without a pib-hca fails, saying why, and vm1 runs on in its old QEMU,
its traffic intact."""

import time

from pibctl import fabric, migrate, ui
from transfers import BackgroundTraffic, same_at_both_ends

# RC timeout 16 (268 ms) x 8 tries: a move stops the guest for far less,
# and what it lost on the wire comes again at the first timeout.
TRAFFIC = ["-t", "write,read,send,fadd,cas", "-s", "4096,65536", "-q", "2", "-n", "400",
           "-T", "16", "-r", "7", "-w", "120"]
MOVES = 2  # there and back
# Not judged by the runner's ibqueryerrors after the module (testing.py).
ERRORS_ON_PURPOSE = ("packets to vm1's switch port while it moves are discarded "
                     "(PortXmitDiscards), as a move loses what is on the wire")
COUNTERS = ("ack_timeout", "duplicate_request", "out_of_seq_request")


def _counters(ctx, vm):
    path = f"/sys/class/infiniband/{ctx.fabric.vm(vm).device}/ports/1/hw_counters"
    out = ctx.sh(vm, "; ".join(f"cat {path}/{name}" for name in COUNTERS)).out.split()
    return dict(zip(COUNTERS, map(int, out)))


def _port_line(ctx, vm):
    """What vm's switch port is, as its switch says: "ACTIVE, link up"."""
    switch, port = ctx.fabric.vm(vm).cables[0]
    return fabric.switch_port_states(ctx.fabric).get(f"{switch}:{port}", "?")


def test_live_migration_under_rc_traffic_there_and_back(ctx):
    before = {vm: _counters(ctx, vm) for vm in ("vm1", "vm2")}
    lid = ctx.sh("vm1", f"cat /sys/class/infiniband/{ctx.fabric.vm('vm1').device}/ports/1/lid"
                 ).out.strip()
    run = BackgroundTraffic(ctx, TRAFFIC, 18900)
    time.sleep(3)
    assert run.running(), "the traffic ended before the first move"
    for n in range(MOVES):
        old = ctx.fabric.vm("vm1").pid
        moved = migrate.migrate(ctx.fabric, "vm1")
        assert moved.pid != old and fabric.ours(moved.pid, ctx.fabric.run_dir)
        print(f"move {n + 1}: vm1 from QEMU {old} to {moved.pid}: downtime {moved.downtime_ms} ms, "
              f"migration {moved.total_ms} ms, {moved.ram_mb:.0f} MB of RAM")
        assert "ACTIVE, link up" in _port_line(ctx, "vm1"), _port_line(ctx, "vm1")
        time.sleep(2)
    rc, out, src, sout = run.wait()
    assert rc == 0 and src == 0, f"client {rc}, server {src}\n{out}\n{sout}"
    lines = same_at_both_ends(out, sout)
    moved_bytes = sum(int(line["bytes"]) for line in lines.values())
    after = {vm: _counters(ctx, vm) for vm in ("vm1", "vm2")}
    print(f"{moved_bytes} bytes in {len(lines)} kinds of transfer, every byte checked; "
          + "; ".join(f"{vm}: " + ", ".join(f"{k} +{after[vm][k] - before[vm][k]}" for k in COUNTERS)
                      for vm in after))
    # The port kept its LID: the SM saw no change.
    assert ctx.sh("vm1", f"cat /sys/class/infiniband/{ctx.fabric.vm('vm1').device}/ports/1/lid"
                  ).out.strip() == lid


def _without_the_hca(command):
    """A QEMU command line without vm1's pib-hca and its cables' chardevs:
    its migration stream has a section this QEMU has no device for."""
    out, skip = [], False
    for i, arg in enumerate(command):
        if skip:
            skip = False
            continue
        following = command[i + 1] if i + 1 < len(command) else ""
        if arg in ("-device", "-chardev") and (following.startswith("pib-hca")
                                               or following.startswith("socket,id=ib")):
            skip = True
            continue
        out.append(arg)
    return out


def test_a_migration_the_destination_refuses_leaves_the_guest_running(ctx):
    run = BackgroundTraffic(ctx, TRAFFIC, 18901)
    time.sleep(3)
    pid = ctx.fabric.vm("vm1").pid
    try:
        migrate.migrate(ctx.fabric, "vm1", edit=_without_the_hca)
    except ui.StepFailed as e:
        refusal = str(e)
    else:
        raise AssertionError("vm1 moved into a QEMU without a pib-hca")
    print(f"refused: {refusal}")
    # The refusal came in the middle of the traffic: what follows is the
    # resumed link's.
    assert run.running(), "the traffic ended before the refused migration did"
    assert "failed" in refusal and "runs on in its old QEMU" in refusal, refusal
    assert "pib-hca" in refusal, refusal  # the new QEMU names what it had no device for
    assert ctx.fabric.vm("vm1").pid == pid and fabric.ours(pid, ctx.fabric.run_dir)
    rc, out, src, sout = run.wait()
    assert rc == 0 and src == 0, f"client {rc}, server {src}\n{out}\n{sout}"
    lines = same_at_both_ends(out, sout)
    print(f"the traffic went on: {sum(int(line['bytes']) for line in lines.values())} bytes, "
          "every byte checked")
    assert "ACTIVE, link up" in _port_line(ctx, "vm1"), _port_line(ctx, "vm1")
