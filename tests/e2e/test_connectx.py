"""The ConnectX personality (docs/mlx5.md) with the guest kernel's own,
unmodified mlx5_core and mlx5_ib: on a fabric of its own
(tests/e2e/connectx.topo), vm2's HCA is a ConnectX-5 and vm1's a pib-hca
running opensm. The SM finds and configures the ConnectX like any CA, and
kernel consumers on the two guests talk: IPoIB, in datagram mode (UD
QPs) and in connected mode (RC QPs on SRQs, connected by the CM), carries
random data both ways, every byte compared; NVMe over Fabrics, NFS over
RDMA and SRP run with the ConnectX as initiator and as target (the
initiator fast-registers every I/O buffer: on the ConnectX, a UMR WQE on
a free key). User space (libmlx5) is issue 31's."""

import collections
import re
import secrets
import time
from pathlib import Path

import pytest

from pibctl import fabric, qmp
from pibctl.pairs import ipoib_up
from storage import (NfsMounted, NvmeConnected, Roles, SrpDisk, disk_roundtrip, nfs_roundtrip,
                     nvme_roundtrip)
from transfers import bulk_tcp

pytestmark = pytest.mark.topology("connectx.topo")

CX = "vm2"
DEVICE = "/sys/class/infiniband/mlx5_0"
NODE_DESC = "vm2 ConnectX personality"
CM_SUPPORTED = 1 << 16  # PortInfo CapabilityMask: IsCommunicationManagementSupported
PAYLOAD_MIB = 8
PORT = 18590
STORAGE_MIB = 16
# The reload loop: a few in every run (one of them with the bulk
# transfer), many more in the soak (--soak): races of a teardown are
# rare, and the soak is where they are hunted.
RELOADS = 3
SOAK_RELOADS = 40
RELOAD_MIB = 1
BULK_EVERY = 3
IDLE_S = 600
# What a kernel log must not say after the driver's unloads and loads.
KERNEL_TROUBLE = ("WARNING", "BUG", "leak", "Oops", "timed out", "Call Trace", "mlx5_cmd_out_err",
                  "failed", "error")
# IPoIB holds packets for a multicast group until its join completes, then
# sends them again; when its carrier is off at that moment (a fresh ib0 has
# it on only once it has joined the broadcast group), the qdisc is the noop
# one, which drops them with NET_XMIT_CN (2). A race inside the guest's
# IPoIB, seen once in 20 reloads on 6.1; the traffic after it is checked
# byte for byte all the same.
KERNEL_BENIGN = ("ipoib_mcast_join_finish:dev_queue_xmit failed to re-queue packet, ret:2",)
# The ConnectX the initiator, then the target.
BOTH_WAYS = (Roles(host=CX, target="vm1"), Roles(host="vm1", target=CX))


def _lid(ctx, vm, device):
    return int(ctx.run(vm, ["cat", f"/sys/class/infiniband/{device}/ports/1/lid"]).out, 16)


def test_mlx5_core_and_mlx5_ib_drive_the_connectx(ctx):
    ids = ctx.sh(CX, "lspci -n -d 15b3:1017").out
    assert "15b3:1017" in ids, ids
    driver = ctx.sh(CX, "for d in /sys/bus/pci/devices/*; do "
                        "[ $(cat $d/vendor):$(cat $d/device) = 0x15b3:0x1017 ] && "
                        "basename $(readlink $d/driver); done; true").out
    assert driver.split() == ["mlx5_core"], driver
    state = ctx.run(CX, ["cat", f"{DEVICE}/ports/1/state"]).out.strip()
    assert state == "4: ACTIVE", state
    board = ctx.run(CX, ["cat", f"{DEVICE}/board_id"]).out.strip()
    assert board == "PIB0000000001", board
    print(f"{CX}: 15b3:1017 bound by mlx5_core, mlx5_0 port 1 {state}, board_id {board}")


def test_the_sm_sees_a_connectx_with_its_node_description(ctx):
    ctx.sh(CX, f"printf '%s' '{NODE_DESC}' > {DEVICE}/node_desc")
    lid = _lid(ctx, CX, "mlx5_0")
    info = ctx.run("vm1", ["smpquery", "nodeinfo", str(lid)]).out
    vendor = re.search(r"VendorId:\.+0x([0-9a-f]+)", info)
    device = re.search(r"DevId:\.+0x([0-9a-f]+)", info)
    assert vendor and int(vendor.group(1), 16) == 0x02c9, info
    assert device and int(device.group(1), 16) == 0x1017, info
    desc = ctx.run("vm1", ["smpquery", "nodedesc", str(lid)]).out
    assert NODE_DESC in desc, desc
    port = ctx.run("vm1", ["smpquery", "portinfo", str(lid), "1"]).out
    mask = re.search(r"CapMask:\.+0x([0-9a-f]+)", port)
    assert mask and int(mask.group(1), 16) & CM_SUPPORTED, port
    print(f"from vm1: LID {lid} is VendorID 0x02c9 DevID 0x1017 '{NODE_DESC}', "
          f"CapMask 0x{int(mask.group(1), 16):x} (the CM's bit set through PCAP)")


def _counter(ctx, lid, name):
    out = ctx.run("vm1", ["perfquery", "-x", str(lid), "1"]).out
    found = re.search(rf"^{name}:\.+(\d+)", out, re.M)
    assert found, out
    return int(found.group(1))


def _both_ways(ctx, mode, mtu):
    """IPoIB in `mode` on both guests: pings, then PAYLOAD_MIB of random
    bytes each way over TCP, SHA-256 compared at both ends; the
    ConnectX's PortXmitData (4-byte words) must have grown by at least
    what it sent."""
    ipoib_up(ctx)
    for vm in ("vm1", "vm2"):
        ctx.sh(vm, f"echo {mode} > /sys/class/net/ib0/mode && ip link set ib0 mtu {mtu}")
    for src, dst in (("vm1", "vm2-ib"), ("vm2", "vm1-ib")):
        ping = ctx.run(src, ["ping", "-c", "3", "-i", "0.2", "-W", "5", dst], check=False)
        assert ping.exitcode == 0 and " 0% packet loss" in ping.out, ping.out + ping.err
    lid = _lid(ctx, CX, "mlx5_0")
    sent_before = _counter(ctx, lid, "PortXmitData")
    rates = [bulk_tcp(ctx, PAYLOAD_MIB, PORT, source_vm=src, sink_vm=dst)
             for src, dst in (("vm1", "vm2"), ("vm2", "vm1"))]
    words = _counter(ctx, lid, "PortXmitData") - sent_before
    assert words * 4 >= PAYLOAD_MIB << 20, words
    print(f"IPoIB {mode} (MTU {mtu}): {PAYLOAD_MIB} MiB vm1 -> vm2 at {rates[0]:.1f} MB/s, "
          f"vm2 -> vm1 at {rates[1]:.1f} MB/s, SHA-256 equal; the ConnectX sent "
          f"{words * 4 >> 20} MiB (PortXmitData)")


def test_ipoib_datagram_mode_carries_random_data_both_ways(ctx):
    _both_ways(ctx, "datagram", 2044)


def test_ipoib_connected_mode_carries_random_data_both_ways(ctx):
    # RC QPs on an SRQ at both ends, connected by the CM through QP1.
    try:
        _both_ways(ctx, "connected", 65520)
    finally:
        for vm in ("vm1", "vm2"):
            ctx.sh(vm, "echo datagram > /sys/class/net/ib0/mode && ip link set ib0 mtu 2044",
                   check=False)


def _hca(vm):
    return "the ConnectX" if vm == CX else "the pib-hca"


def _storage_line(protocol, roles, write, read, what=f"{STORAGE_MIB} MiB"):
    return (f"{protocol} from {_hca(roles.host)} ({roles.host}) to {_hca(roles.target)} "
            f"({roles.target}): {what} written at {write:.1f} MB/s, read at {read:.1f} MB/s, "
            f"SHA-256 equal at both ends")


def test_nvme_over_fabrics_both_ways(ctx):
    for roles in BOTH_WAYS:
        with NvmeConnected(ctx, roles):
            write, read = nvme_roundtrip(ctx, roles, STORAGE_MIB)
        print(_storage_line("NVMe-oF", roles, write, read))


def test_nfs_over_rdma_both_ways(ctx):
    for roles in BOTH_WAYS:
        with NfsMounted(ctx, roles):
            write, read = nfs_roundtrip(ctx, roles, 2, STORAGE_MIB // 2)
        print(_storage_line("NFS/RDMA", roles, write, read, f"2 files of {STORAGE_MIB // 2} MiB"))


def test_srp_both_ways(ctx):
    for roles in BOTH_WAYS:
        with SrpDisk(ctx, roles) as disk:
            write, read = disk_roundtrip(ctx, roles, disk, STORAGE_MIB)
        print(_storage_line("SRP", roles, write, read))


def test_devlink_and_ethtool_answer(ctx):
    # devlink reads the firmware's version through MCAM, MCQS and MCQI;
    # without them mlx5_core would warn that it cannot.
    seen = len(ctx.run(CX, ["dmesg"]).out.splitlines())
    info = ctx.run(CX, ["devlink", "dev", "info"]).out
    assert "driver mlx5_core" in info and "fw.psid PIB0000000001" in info, info
    versions = re.findall(r"fw\.version (\S+)", info)
    assert versions == ["0.1.0000", "0.1.0000"], info  # running, stored
    drvinfo = ctx.run(CX, ["ethtool", "-i", "ib0"]).out
    assert "driver: ib_ipoib" in drvinfo and "firmware-version: 0.1.0" in drvinfo, drvinfo
    said = ctx.run(CX, ["dmesg"]).out.splitlines()[seen:]
    assert not said, "\n".join(said)
    print(f"devlink dev info: fw.psid PIB0000000001, fw.version {versions[0]} running and stored; "
          f"ethtool -i ib0: {drvinfo.splitlines()[0]}, {drvinfo.splitlines()[2]}")


def _reload(ctx):
    """mlx5_ib and mlx5_core unloaded and loaded again (bounded), the port
    ACTIVE again and IPoIB up on the new ib0."""
    ctx.sh(CX, "modprobe -r mlx5_ib mlx5_core && modprobe mlx5_ib && "
               "for i in $(seq 300); do [ -e /sys/class/infiniband/mlx5_0 ] && exit 0; "
               "sleep 0.1; done; exit 1", timeout=120)
    fabric.wait_active(ctx.fabric, timeout=60)
    ipoib_up(ctx, [CX])


def _pattern_pings(ctx, src, dst, pattern):
    """Three pings of 1400 bytes filled with `pattern` (16 hex bytes) from
    `src` to `dst`: ping compares every byte of each reply with what it
    sent ('wrong data byte' otherwise), and all must come back. The first
    may wait for the path (bounded)."""
    argv = ["ping", "-c", "3", "-i", "0.05", "-W", "5", "-s", "1400", "-p", pattern, dst]
    deadline = time.monotonic() + 30
    while True:
        out = ctx.run(src, argv, check=False)
        if out.exitcode == 0 or time.monotonic() > deadline:
            break
    assert out.exitcode == 0 and " 0% packet loss" in out.out, out.out + out.err
    assert "wrong data byte" not in out.out, out.out


def _reload_loop(ctx, reloads):
    """`reloads` times: mlx5_ib and mlx5_core unloaded (the function torn
    down, with every object the driver made, the MR cache's thousands of
    keys among them, and the pages it gave) and loaded again; the port
    ACTIVE again, then pings of random patterns each way (every byte of
    the replies compared by ping), and after every BULK_EVERY-th reload
    RELOAD_MIB of random data each way over TCP, SHA-256 compared. The
    kernel log says nothing troubling."""
    seen = len(ctx.run(CX, ["dmesg"]).out.splitlines())
    reloading = moving = 0.0
    bulk = 0
    for i in range(reloads):
        start = time.monotonic()
        _reload(ctx)
        loaded = time.monotonic()
        for src, dst in ((CX, "vm1-ib"), ("vm1", f"{CX}-ib")):
            _pattern_pings(ctx, src, dst, secrets.token_hex(16))
        if i % BULK_EVERY == BULK_EVERY - 1:
            for src, dst in ((CX, "vm1"), ("vm1", CX)):
                bulk_tcp(ctx, RELOAD_MIB, PORT + 1 + i, source_vm=src, sink_vm=dst)
            bulk += 1
        reloading += loaded - start
        moving += time.monotonic() - loaded
    said = ctx.run(CX, ["dmesg"]).out.splitlines()[seen:]
    troubling = [line for line in said if any(t in line for t in KERNEL_TROUBLE)
                 and not any(b in line for b in KERNEL_BENIGN)]
    assert not troubling, "\n".join(troubling)
    _health_is_silent(ctx, seen)
    print(f"{reloads} unloads and loads of mlx5_ib and mlx5_core, {reloading / reloads:.1f} s each "
          f"to an ACTIVE port; after each, pings of a random pattern each way, every byte "
          f"equal; after {bulk} of them {RELOAD_MIB} MiB each way, SHA-256 equal "
          f"({moving / reloads:.1f} s of traffic each); the kernel log said nothing troubling "
          f"({len(said)} lines)")


def test_mlx5_reload_loop_with_traffic_in_between(ctx):
    """RELOADS of _reload_loop's reloads."""
    _reload_loop(ctx, RELOADS)


@pytest.mark.soak  # ./pib test --soak: the races of a driver's teardown are rare
def test_mlx5_reload_loop_soak(ctx):
    """SOAK_RELOADS of _reload_loop's reloads."""
    _reload_loop(ctx, SOAK_RELOADS)


COMMAND_TRACE = "pib_hca_mlx5_command"
TRACED = re.compile(r"ConnectX command slot \d+: (\S+) \(0x([0-9a-f]{4})\) op_mod 0x[0-9a-f]+ "
                    r"status 0x([0-9a-f]+) syndrome 0x([0-9a-f]{8})")
COMMAND_TABLE = Path(__file__).resolve().parents[2] / "qemu-hw/core/src/mlx5/mlx5_commands.cc"


def _implemented_commands() -> dict:
    """Opcode -> name of every command the device's table gives a handler
    (mlx5::Commands::kTable): the code says, not a list typed here."""
    rows = re.findall(r'\{0x([0-9a-f]+), "(\w+)", [^{}]*?, &Commands::\w+\}',
                      COMMAND_TABLE.read_text())
    assert len(rows) > 40, f"cannot read the command table in {COMMAND_TABLE}"
    return {int(op, 16): name for op, name in rows}


def _trace_commands(ctx, on: bool) -> None:
    qmp.command(ctx.fabric.vm(CX).path / "qmp.sock", "trace-event-set-state",
                name=COMMAND_TRACE, enable=on)


def test_mlx5_commands_the_driver_issues_counted_from_a_trace(ctx):
    """With the device's command trace on, mlx5_ib and mlx5_core are
    unloaded and loaded, the port comes back ACTIVE and IPoIB up (the
    driver's whole life: teardown, probe, the MR cache, the UMR and GSI
    QPs, IPoIB's QPs), and a ping crosses: every command the driver issued
    is one the device implements, and every one succeeded."""
    log = ctx.fabric.vm(CX).qemu_log
    start = log.stat().st_size
    _trace_commands(ctx, True)
    try:
        _reload(ctx)
        _pattern_pings(ctx, CX, "vm1-ib", secrets.token_hex(16))
    finally:
        _trace_commands(ctx, False)
    with log.open("rb") as f:
        f.seek(start)
        traced = [TRACED.search(line) for line in f.read().decode(errors="replace").splitlines()]
    traced = [m for m in traced if m]
    implemented = _implemented_commands()
    issued = collections.Counter((int(m[2], 16), m[1]) for m in traced)
    failed = [m[0] for m in traced if int(m[3], 16) or int(m[4], 16)]
    assert traced, f"no {COMMAND_TRACE} line in {log}"
    assert not failed, "\n".join(failed[:20])
    unknown = sorted(f"{name} (0x{op:04x})" for op, name in issued if op not in implemented)
    assert not unknown, unknown
    assert {"ENABLE_HCA", "MANAGE_PAGES", "INIT_HCA", "TEARDOWN_HCA", "CREATE_EQ", "CREATE_MKEY",
            "CREATE_QP", "MAD_IFC"} <= {name for _, name in issued}, issued
    print(f"the driver issued {len(issued)} of the {len(implemented)} implemented commands, "
          f"{sum(issued.values())} in all, none refused:")
    for (op, name), n in sorted(issued.items()):
        print(f"  0x{op:04x} {name:24} {n:6}")
    print("implemented, not issued: " + ", ".join(
        name for op, name in sorted(implemented.items()) if (op, name) not in issued))


HEALTH_TROUBLE = ("health", "Fatal", "fatal", "syndrome", "assert", "miss count")


def _health_reporters(ctx):
    """`devlink health show` of the ConnectX: each reporter's name and
    error count; the firmware reporters must be there."""
    out = ctx.run(CX, ["devlink", "health", "show"]).out
    found = re.findall(r"reporter (\S+)\s+state (\S+) error (\d+)", out)
    names = [name for name, _, _ in found]
    assert "fw" in names and "fw_fatal" in names, out
    return found, out


def _health_is_silent(ctx, since_line):
    """Every devlink health reporter healthy with no error, and nothing in
    the kernel log since `since_line` from the health poll."""
    reporters, out = _health_reporters(ctx)
    bad = [(n, s, e) for n, s, e in reporters if s != "healthy" or e != "0"]
    assert not bad, out
    said = ctx.run(CX, ["dmesg"]).out.splitlines()[since_line:]
    spoke = [line for line in said if "mlx5" in line and any(t in line for t in HEALTH_TROUBLE)]
    assert not spoke, "\n".join(spoke)
    return reporters


def test_mlx5_health_poll_silent_since_boot(ctx):
    """mlx5_core reads the health counter every 2 s and complains when it
    stops, or when the health buffer reports a syndrome: since the guest
    booted (and the tests before this one) it never did, and devlink's
    health reporters count no error. The reload loop checks the same
    after its reloads."""
    reporters = _health_is_silent(ctx, 0)
    uptime = float(ctx.run(CX, ["cat", "/proc/uptime"]).out.split()[0])
    print(f"devlink health: {', '.join(f'{n} {s}, {e} errors' for n, s, e in reporters)} "
          f"after {uptime:.0f} s up; the kernel log has no health message")


@pytest.mark.soak  # ./pib test --soak: ten idle minutes
def test_mlx5_idle_ten_minutes_health_poll_silent(ctx):
    """The ConnectX guest left idle for IDLE_S: some 300 health polls, none
    of which complains, and the port still ACTIVE afterwards."""
    seen = len(ctx.run(CX, ["dmesg"]).out.splitlines())
    time.sleep(IDLE_S)
    reporters = _health_is_silent(ctx, seen)
    state = ctx.run(CX, ["cat", f"{DEVICE}/ports/1/state"]).out.strip()
    assert "ACTIVE" in state, state
    print(f"{IDLE_S} s idle: devlink health "
          f"{', '.join(f'{n} {s}, {e} errors' for n, s, e in reporters)}, no health message; "
          f"port {state}")
