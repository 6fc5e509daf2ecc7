"""Live migration (docs/migration.md, issue 33): vm1, which runs opensm,
moves to a new QEMU process on this host (./pib fabric migrate) in the
middle of RC traffic with vm2 both ways, there and back twice, vm1's
buffers registered on demand (implicitly in one direction, a region per
buffer in the other): pib-traffic
checks every byte of WRITEs, READs, SENDs and atomics at both ends, at RC
timeout 30 (73 minutes: what a move lost is resent as the link resumes,
and no operation may take 20 s), no QP goes to error, the switch keeps
vm1's link up (the port ACTIVE with its LID) and opensm stays the
subnet's master. vm1 moves again while it writes to
an NVMe-oF namespace of vm2's, and what it wrote reads back whole. A
migration to a QEMU without a pib-hca, or to one whose pib-hca reads
another state version, fails, saying why, and vm1 runs on in its old
QEMU, its traffic intact. A snapshot of the whole fabric taken in the middle
of the traffic is restored (./pib fabric snapshot), and the traffic
completes there, every byte checked; the restored guests reseeded their
random numbers and took ssh keys of their own, and the snapshot holds
few of the pages the guests freed at boot (free page reporting)."""

import re
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from pibctl import fabric, migrate, snapshot, ui
from storage import NvmeConnected, Roles, nvme_device
from transfers import (UNDER_WAY, BackgroundTraffic, moves_under_traffic, on_demand_regions,
                       same_at_both_ends, some_traffic_through)

pytestmark = pytest.mark.errors_on_purpose(
    "packets to vm1's switch port while it moves, or to a restored switch port before its guest "
    "resumed the link, are discarded (PortXmitDiscards), as a move loses what is on the wire")

# RC timeout 16 (268 ms) x 8 tries: a move stops the guest for far less,
# and what it lost on the wire comes again at the first timeout. Every
# operation at once (-P), on until the test asks it to stop (SIGUSR1,
# BackgroundTraffic.stop) when what it does to the fabric is done; -n
# only bounds it.
TRAFFIC = ["-t", "write,read,send,fadd,cas", "-s", "4096,65536", "-q", "2", "-n", "1000",
           "-P", "-T", "16", "-r", "7", "-w", "120"]
# The moves under traffic: RC timeout 30, which IBA makes 73 minutes, so
# only what the resumed link says makes a QP resend what a move lost
# (docs/migration.md); an operation that waits 20 s fails the test.
LONG_TIMEOUT = ["-t", "write,read,send,fadd,cas", "-s", "4096,65536,1M+3", "-q", "2",
                "-n", "1000", "-P", "-T", "30", "-r", "7", "-w", "20"]
MOVES = 4  # there and back, twice
COUNTERS = ("ack_timeout", "duplicate_request", "out_of_seq_request")


def _counters(ctx, vm):
    path = f"/sys/class/infiniband/{ctx.fabric.vm(vm).device}/ports/1/hw_counters"
    out = ctx.sh(vm, "; ".join(f"cat {path}/{name}" for name in COUNTERS)).out.split()
    return dict(zip(COUNTERS, map(int, out)))


def _port_line(ctx, vm):
    """What vm's switch port is, as its switch says: "ACTIVE, link up"."""
    switch, port = ctx.fabric.vm(vm).cables[0]
    return fabric.switch_port_states(ctx.fabric).get(f"{switch}:{port}", "?")


def _opensm(ctx):
    """opensm's pid in vm1, and the SM as vm2 sees it (its LID, GUID and state)."""
    pid = ctx.sh("vm1", "pidof opensm").out.strip()
    sm = ctx.sh("vm2", "sminfo").out.strip()
    found = re.search(r"sm lid (\d+) sm guid (0x[0-9a-f]+)", sm)
    assert found and "SMINFO_MASTER" in sm, sm
    return pid, found.group(1), found.group(2)


def test_live_migration_under_rc_traffic_there_and_back_twice(ctx):
    before = {vm: _counters(ctx, vm) for vm in ("vm1", "vm2")}
    sm = _opensm(ctx)
    lid = ctx.sh("vm1", f"cat /sys/class/infiniband/{ctx.fabric.vm('vm1').device}/ports/1/lid"
                 ).out.strip()
    # Both ways: vm1 the requester of one run and the responder of the
    # other, its buffers on demand (docs/prm.md §6.9, §6.10): one implicit
    # region in the first, a region per buffer in the second. Their pages'
    # mappings move with it.
    runs = [BackgroundTraffic(ctx, LONG_TIMEOUT + ["--odp", "implicit"], 18900),
            BackgroundTraffic(ctx, LONG_TIMEOUT, 18903, client_vm="vm2", server_vm="vm1",
                              server_args=["--odp", "explicit"])]
    # A command in vm1 through its guest agent, running across the first
    # move: its status is asked of the new QEMU, whose agent moved with
    # the guest (./pib exec).
    across = {}

    def command_across():
        try:
            across["result"] = fabric.exec_in("vm1", ["sh", "-c", "sleep 12; echo across the move"],
                                              timeout=120)
        except Exception as e:  # pylint: disable=broad-except
            across["error"] = repr(e)  # not the exception: its traceback holds frames

    waiter = threading.Thread(target=command_across)
    waiter.start()
    for client in ('vm1', 'vm2'):  # each run under way (bounded by the 3 s it was given)
        some_traffic_through(ctx, client, 3, UNDER_WAY)
    assert all(run.running() for run in runs), "the traffic ended before the first move"
    regions = on_demand_regions(ctx, "vm1")
    assert regions["implicit"] == 1 and regions["explicit"] > 0, regions
    moves_under_traffic(ctx, runs, "vm1", MOVES, lambda vm: _counters(ctx, vm), before)
    waiter.join(timeout=150)
    assert "result" in across, f"the command across the move: {across.get('error', 'no answer')}"
    assert across["result"].exitcode == 0 and across["result"].out == "across the move\n", \
        across["result"]
    # The port kept its LID: the SM saw no change.
    assert ctx.sh("vm1", f"cat /sys/class/infiniband/{ctx.fabric.vm('vm1').device}/ports/1/lid"
                  ).out.strip() == lid
    # opensm moved with vm1 and is the same master.
    assert _opensm(ctx) == sm, (sm, _opensm(ctx))


NVME_MB = 48


def test_live_migration_while_writing_to_an_nvme_of_namespace(ctx):
    """vm1 writes the same random data over and over to vm2's namespace
    (16 KiB direct I/Os, each a fast registration) while it moves; then
    the namespace reads back as that data, on vm1 and in vm2's RAM disk."""
    with NvmeConnected(ctx):
        dev = nvme_device(ctx, Roles())
        ctx.sh("vm1", f"head -c {NVME_MB}M /dev/urandom > /tmp/mig.in; rm -f /tmp/mig.*.done; "
                      "echo 0 > /tmp/mig.passes")
        ctx.sh("vm1", f"(while [ ! -e /tmp/mig.stop ]; do "
                      f"dd if=/tmp/mig.in of={dev} bs=16k oflag=direct status=none || exit 1; "
                      "echo $(( $(cat /tmp/mig.passes) + 1 )) > /tmp/mig.passes; done; "
                      "echo ok > /tmp/mig.done) >/tmp/mig.log 2>&1 </dev/null &")
        time.sleep(2)
        passes = int(ctx.sh("vm1", "cat /tmp/mig.passes").out)
        moved = migrate.migrate(ctx.fabric, "vm1")
        time.sleep(2)
        during = int(ctx.sh("vm1", "cat /tmp/mig.passes").out)
        ctx.sh("vm1", "touch /tmp/mig.stop")
        deadline = time.monotonic() + 120
        while ctx.sh("vm1", "cat /tmp/mig.done 2>/dev/null; true").out.strip() != "ok":
            assert time.monotonic() < deadline, ctx.sh("vm1", "cat /tmp/mig.log").out
            time.sleep(0.5)
        after = int(ctx.sh("vm1", "cat /tmp/mig.passes").out)
        assert after > during, "the writes did not go on after the move"
        sums = ctx.sh("vm1", f"head -c {NVME_MB}M /tmp/mig.in | sha256sum; "
                             f"dd if={dev} bs=1M count={NVME_MB} iflag=direct status=none | "
                             "sha256sum").out.split()
        target = ctx.sh("vm2", f"head -c {NVME_MB}M /dev/ram0 | sha256sum").out.split()[0]
        ctx.sh("vm1", "rm -f /tmp/mig.*")
    assert sums[0] == sums[2] == target, (sums, target)
    print(f"vm1 moved in {moved.total_ms} ms (downtime {moved.downtime_ms} ms) while writing "
          f"the same {NVME_MB} MiB to vm2's namespace over and over (passes done: {passes} when "
          f"it moved, {after} in all); the namespace reads back as written, on vm1 and in vm2's "
          "RAM disk")


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


class _VersionRelay:
    """Carries a migration from the old QEMU to the new one, both ways (the
    return path), and changes one thing on the way: the version of the
    pib-hca's state (its PIBD section's first field, docs/migration.md),
    as a QEMU whose device saves another version would send it. The new
    QEMU listens on `path` + ".relayed"; the old one is given `path`."""

    def __init__(self, path: Path, version: int, new_version: int):
        self.path, self.version, self.changed = path, new_version, 0
        self.header = re.compile(b"PIBD.{4}" + re.escape(version.to_bytes(4, "little")), re.S)
        self.listener = None

    def edit(self, command):
        """migrate.migrate's `edit`, called once it made way for the channel:
        the relay listens on it, and the new QEMU behind it."""
        Path(f"{self.path}.relayed").unlink(missing_ok=True)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(self.path))
        self.listener.listen(1)
        self.listener.settimeout(120)
        threading.Thread(target=self._serve, daemon=True).start()
        return [arg.replace(f"unix:{self.path}", f"unix:{self.path}.relayed") for arg in command]

    def close(self):
        if self.listener:
            self.listener.close()

    def _serve(self):
        try:
            source, _ = self.listener.accept()
        except OSError:
            return
        with source, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dest:
            dest.connect(f"{self.path}.relayed")
            back = threading.Thread(target=self._pump, args=(dest, source, False), daemon=True)
            back.start()
            self._pump(source, dest, True)
            back.join(30)

    def _pump(self, src, dst, rewrite):
        held = b""  # a header may be cut between two reads: its start waits
        try:
            while chunk := src.recv(1 << 20):
                data = held + chunk
                if rewrite and not self.changed:
                    found = self.header.search(data)
                    if found:
                        at = found.start() + 8
                        data = data[:at] + self.version.to_bytes(4, "little") + data[at + 4:]
                        self.changed += 1
                    else:
                        data, held = data[:-11], data[-11:]
                        dst.sendall(data)
                        continue
                held = b""
                dst.sendall(data)
            dst.sendall(held)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            return


def _refused(ctx, edit):
    """Why the migration of vm1 whose new QEMU's command line `edit`
    changes was refused; vm1 must run on in its old QEMU."""
    pid = ctx.fabric.vm("vm1").pid
    try:
        migrate.migrate(ctx.fabric, "vm1", edit=edit)
    except ui.StepFailed as e:
        refusal = str(e)
    else:
        raise AssertionError("vm1 moved into a QEMU that should have refused it")
    print(f"refused: {refusal}")
    assert "failed" in refusal and "runs on in its old QEMU" in refusal, refusal
    assert ctx.fabric.vm("vm1").pid == pid and fabric.ours(pid, ctx.fabric.run_dir)
    return refusal


def test_migrations_the_destination_refuses_leave_the_guest_running(ctx):
    """Two new QEMUs refuse vm1 in the middle of its traffic: one without a
    pib-hca, and one whose pib-hca reads another state version (the
    stream reaches it as a QEMU whose device saves the next version
    would send it). Each says why, and vm1 runs on in its old QEMU, its traffic
    intact."""
    run = BackgroundTraffic(ctx, TRAFFIC, 18901)
    some_traffic_through(ctx, "vm1", 3.0, at_least=UNDER_WAY)  # under way
    refusal = _refused(ctx, _without_the_hca)
    assert "pib-hca" in refusal, refusal  # the new QEMU names what it had no device for
    version = migrate.state_version()
    relay = _VersionRelay(ctx.fabric.vm("vm1").path / "migration.sock", version, version + 1)
    try:
        refusal = _refused(ctx, relay.edit)
    finally:
        relay.close()
    assert relay.changed == 1, "the relay did not find the device state's version"
    assert f"of version {version + 1}; this device reads version {version}" in refusal, refusal
    # The refusals came in the middle of the traffic: what follows is the
    # resumed link's.
    assert run.running(), "the traffic ended before the refused migrations did"
    some_traffic_through(ctx, "vm1", 2.0, at_least=UNDER_WAY)
    run.stop()
    rc, out, src, sout = run.wait()
    assert rc == 0 and src == 0, f"client {rc}, server {src}\n{out}\n{sout}"
    lines = same_at_both_ends(out, sout)
    print(f"the traffic went on: {sum(int(line['bytes']) for line in lines.values())} bytes, "
          "every byte checked")
    assert "ACTIVE, link up" in _port_line(ctx, "vm1"), _port_line(ctx, "vm1")


def _host_keys(ctx):
    """Each guest's ssh host key, as its fabric made it for it."""
    keys = Path(ctx.fabric.run_dir) / "ssh"
    return {vm.name: (keys / f"host-{vm.name}.pub").read_text().split()[1]
            for vm in ctx.fabric.vms}


def _lids(ctx):
    return {vm.name: ctx.sh(vm.name, f"cat /sys/class/infiniband/{vm.device}/ports/1/lid"
                            ).out.strip() for vm in ctx.fabric.vms}


# The kernel fills each page it frees of its initramfs (and of its own
# init code) with 0xcc; what QEMU saves of a guest is every page that is
# not zero. With free page reporting (tools/pibctl/fabric.py) QEMU drops
# the freed pages the guest reports, those in free blocks of 2 MB or
# more: a saved guest keeps 22 MB of them (measured), without it 366 MB.
POISONED_PAGE = b"\xcc" * 4096
POISONED_MB_MAX = 64


def _poisoned_mb(state: Path) -> float:
    """How much of a saved guest is pages' worth of 0xcc, counted a read of
    64 MiB at a time (bytes.count: 0.5 s for a guest, where a regular
    expression took 6.5 s; a run split between two reads loses a page)."""
    pages = 0
    with open(state, "rb") as f:
        while chunk := f.read(64 << 20):
            pages += chunk.count(POISONED_PAGE)
    return pages * len(POISONED_PAGE) / 1e6


def test_a_fabric_snapshot_taken_mid_traffic_is_restored_and_the_traffic_completes(ctx):
    keys_before, lids_before = _host_keys(ctx), _lids(ctx)
    where = snapshot.snapshots_dir() / "test-mid-traffic"
    run = BackgroundTraffic(ctx, TRAFFIC, 18902)
    some_traffic_through(ctx, "vm1", 3.0, at_least=UNDER_WAY)  # under way
    assert run.running(), "the traffic ended before the snapshot"
    try:
        taken = snapshot.save(ctx.fabric, where)
        print(f"saved in {taken.total_s:.1f} s, the guests stopped {taken.paused_ms} ms, "
              f"{taken.mb:.0f} MB")
        poisoned = {vm.name: _poisoned_mb(where / f"{vm.name}.state") for vm in ctx.fabric.vms}
        print("pages the guests freed at boot (0xcc) in the snapshot: "
              + ", ".join(f"{name} {mb:.1f} MB" for name, mb in poisoned.items()))
        # The original runs on (its traffic past the snapshot's moment is
        # its own); then it goes, and the snapshot comes back in its place.
        some_traffic_through(ctx, "vm1", 2.0, at_least=UNDER_WAY)
        assert all(fabric.ours(vm.pid, ctx.fabric.run_dir) for vm in ctx.fabric.vms)
        fabric.down(quiet=True)
        restored, took = snapshot.load(where)
        vars(ctx.fabric).update(vars(restored))  # the runner's fabric is the restored one
    finally:
        shutil.rmtree(where, ignore_errors=True)
    print(f"restored in {took.total_s:.1f} s: running after {took.loaded_s:.1f} s, "
          f"every port ACTIVE {took.active_s:.1f} s later")
    some_traffic_through(ctx, "vm1", 2.0, at_least=UNDER_WAY)  # the restored fabric carries it
    run.stop()
    rc, out, src, sout = run.wait()
    assert rc == 0 and src == 0, f"client {rc}, server {src}\n{out}\n{sout}"
    lines = same_at_both_ends(out, sout)
    print(f"the traffic completed in the restored fabric: "
          f"{sum(int(line['bytes']) for line in lines.values())} bytes, every byte checked")
    assert _lids(ctx) == lids_before  # the SM saw no change
    # The copies made anew what must be new: random seeds, ssh keys.
    keys = _host_keys(ctx)
    assert all(keys[vm] != keys_before[vm] for vm in keys), "the restored fabric kept its ssh keys"
    problems = snapshot.not_unique(ctx.fabric)
    assert not problems, "\n".join(problems)
    ctx.sh("vm1", "ssh -o BatchMode=yes vm2 true")  # known_hosts and the key pair are new too
    assert all(mb < POISONED_MB_MAX for mb in poisoned.values()), poisoned
