"""The subnet manager's world (issue 34): partitions that opensm programs
from a partitions.conf into the HCAs and into the switch ports, which
enforce them; and a standby SM taking over when the master dies, with RC
traffic running through. On the fabric of three guests on one switch
(tests/e2e/connectx.topo: vm1 a pib-hca, vm2 and vm3 ConnectX), and on
the two switches of the second pass (vm1 on switch1, vm2 on switch2), where
the packets cross the inter-switch cables and the switch that drops a
foreign P_Key is the one behind them.

Each test leaves the fabric as it found it: the usual opensm in vm1, the
default partition only."""

import re
import time

import pytest

from pibctl import fabric
from pibctl.pairs import tcp_listening
from transfers import BackgroundTraffic, same_at_both_ends

pytestmark = [
    pytest.mark.topology("connectx.topo"),
    pytest.mark.also_two_switches,
    pytest.mark.errors_on_purpose("foreign P_Keys sent on purpose count in the constraint "
                                  "counters"),
]

BLUE, GREEN, RED = 0x0001, 0x0002, 0x0003  # 15-bit keys
PARTITIONS_CONF = "/run/pib-partitions.conf"
SM_CONF = "/run/pib-sm-extra.conf"
# A standby polls the master every second and takes over after two
# unanswered polls (opensm's defaults, 10 s and 4, take 40 s).
FAILOVER_CONF = "sminfo_polling_timeout 1000\npolling_retry_number 2\n"
FAILOVER_LIMIT_S = 60
FOREIGN_SENDS = 50


def _vms(ctx):
    return tuple(vm.name for vm in ctx.fabric.vms)


def _cable(ctx, vm):
    """The GUID of the switch vm's port 1 is cabled to, and its port."""
    switch, port = ctx.fabric.vm(vm).cables[0]
    return ctx.fabric.topo.switch(switch).guid, port


def _device(ctx, vm):
    return ctx.sh(vm, "ls /sys/class/infiniband | head -1").out.strip()


def _port_guid(ctx, vm):
    gid = ctx.run(vm, ["cat", f"/sys/class/infiniband/{_device(ctx, vm)}/ports/1/gids/0"]).out
    return "0x" + "".join(gid.strip().split(":")[4:])


def _lid(ctx, vm):
    return int(ctx.run(vm, ["cat", f"/sys/class/infiniband/{_device(ctx, vm)}/ports/1/lid"]).out,
               16)


def _pkeys(ctx, vm):
    """{P_Key: index} of the HCA's table, the empty entries left out."""
    out = ctx.sh(vm, f"cd /sys/class/infiniband/{_device(ctx, vm)}/ports/1/pkeys && "
                     "grep -H . *").out
    table = {}
    for line in out.split():
        index, value = line.split(":")
        if int(value, 16) & 0x7fff:
            table[int(value, 16)] = int(index)
    return table


def _start_sm(ctx, vm, conf):
    ctx.sh(vm, f"cat > {SM_CONF} <<'EOF'\n{conf}EOF\n"
               f"PIB_SM_CONFIG={SM_CONF} pib-start-sm")


def _kill_sm(ctx, vm):
    ctx.sh(vm, "kill -KILL $(pidof opensm) 2>/dev/null; "
               "for i in $(seq 50); do pidof opensm >/dev/null || exit 0; sleep 0.1; done; exit 1")


def _usual_sm(ctx):
    """Back to how the fabric booted: opensm in vm1 alone, with its defaults."""
    for vm in _vms(ctx)[1:]:
        _kill_sm(ctx, vm)
    fabric.stop_sm(ctx.fabric)
    fabric.start_sm(ctx.fabric)
    fabric.wait_active(ctx.fabric)


def _constraint_errors(ctx, vm):
    """(PortXmitConstraintErrors, PortRcvConstraintErrors) of the switch
    port facing vm."""
    guid, port = _cable(ctx, vm)
    out = ctx.run("vm1", ["perfquery", "-G", hex(guid), str(port)]).out
    values = {k: int(v) for k, v in re.findall(r"Port(Xmit|Rcv)ConstraintErrors:\.*(\d+)", out)}
    assert values.keys() == {"Xmit", "Rcv"}, out
    return values["Xmit"], values["Rcv"]


def _child(ctx, vm, key, subnet):
    """The IPoIB child interface of full P_Key `key` | 0x8000 on vm's ib0."""
    name = f"ib0.{key | 0x8000:04x}"
    ctx.sh(vm, f"[ -e /sys/class/net/{name} ] || echo {key | 0x8000:#x} > "
               f"/sys/class/net/ib0/create_child; "
               f"ip addr replace {subnet}.{_vms(ctx).index(vm) + 1}/24 dev {name}; "
               f"ip link set {name} up")
    return name


def _pings(ctx, src, dst, subnet, count=3, deadline_s=20):
    """Whether `src` reaches `dst` on `subnet`: a ping that gets an
    answer within `deadline_s` (the child's broadcast join takes a moment)."""
    address = f"{subnet}.{_vms(ctx).index(dst) + 1}"
    result = ctx.run(src, ["ping", "-c", str(count), "-i", "0.2", "-w", str(deadline_s), address],
                     timeout=deadline_s + 30, check=False)
    return result.exitcode == 0


def test_the_switch_enforces_the_partitions_opensm_programs(ctx):
    """opensm, given a partitions.conf, programs the HCAs' P_Key tables
    and the switch ports facing them (PartitionEnforcementCap, inbound and
    outbound enforcement). IPoIB on child interfaces: blue (vm1, vm2 full;
    vm3, when there is one, limited; further guests not in it) carries
    pings between its members; green (vm1 full, the others limited)
    between vm1 and each, never between two limited members. A UD stream vm1 sends with red's P_Key (vm1 alone is
    in red) to vm2 is dropped by the switch port facing vm2, which counts
    each packet in PortXmitConstraintErrors, and never reaches vm2."""
    vms = _vms(ctx)
    third = vms[2] if len(vms) > 2 else None
    guids = {vm: _port_guid(ctx, vm) for vm in vms}
    member = lambda vm, how: f"{guids[vm]}={how}"
    blue = [member("vm1", "full"), member("vm2", "full")] + ([member(third, "limited")]
                                                               if third else [])
    green = [member("vm1", "full")] + [member(vm, "limited") for vm in vms[1:]]
    conf = (f"Default=0x7fff, ipoib : ALL=full ;\n"
            f"blue={BLUE:#06x}, ipoib : {', '.join(blue)} ;\n"
            f"green={GREEN:#06x}, ipoib : {', '.join(green)} ;\n"
            f"red={RED:#06x} : {member('vm1', 'full')} ;\n")
    ctx.sh("vm1", f"cat > {PARTITIONS_CONF} <<'EOF'\n{conf}EOF")
    want = {"vm1": {0xffff, 0x8000 | BLUE, 0x8000 | GREEN, 0x8000 | RED},
            "vm2": {0xffff, 0x8000 | BLUE, GREEN}}
    if third:
        want[third] = {0xffff, BLUE, GREEN}
    for vm in vms[3:]:
        want[vm] = {0xffff, GREEN}
    in_blue = vms[:3]
    try:
        fabric.stop_sm(ctx.fabric)
        _start_sm(ctx, "vm1", f"partition_config_file {PARTITIONS_CONF}\npart_enforce both\n")
        fabric.wait_active(ctx.fabric)
        deadline = time.monotonic() + 60
        while {vm: set(_pkeys(ctx, vm)) for vm in vms} != want:
            assert time.monotonic() < deadline, (
                f"P_Key tables {({vm: sorted(map(hex, _pkeys(ctx, vm))) for vm in vms})}, "
                f"want {({vm: sorted(map(hex, keys)) for vm, keys in want.items()})}")
            time.sleep(1)
        for vm in vms:
            guid, port = _cable(ctx, vm)
            info = ctx.run("vm1", ["smpquery", "-G", "switchinfo", hex(guid)]).out
            assert re.search(r"PartEnforceCap:\.*32\b", info), info
            table = ctx.run("vm1", ["smpquery", "-G", "pkeys", hex(guid), str(port)]).out
            found = {int(k, 16) for k in re.findall(r"0x[0-9a-f]{4}", table)} - {0}
            assert found == want[vm], f"the switch port facing {vm}: {table}"
        print(f"P_Key tables programmed: {({vm: sorted(map(hex, want[vm])) for vm in vms})}, "
              "the switch ports facing each the same")

        for vm in vms:
            if vm in in_blue:
                _child(ctx, vm, BLUE, "10.81.0")
            _child(ctx, vm, GREEN, "10.82.0")
        for src, dst in zip(in_blue, in_blue[1:] + in_blue[:1]):
            assert _pings(ctx, src, dst, "10.81.0"), f"blue: {src} -> {dst}"
        for vm in vms[1:]:
            assert _pings(ctx, vm, "vm1", "10.82.0"), f"green: {vm} -> vm1"
        if third:
            # Both ends' joins are done (each pinged vm1 above): 2 s is ample.
            assert not _pings(ctx, "vm2", third, "10.82.0", count=2, deadline_s=2), (
                f"green: vm2 reached {third}, two limited members")

        before = _constraint_errors(ctx, "vm2")
        index = _pkeys(ctx, "vm1")[0x8000 | RED]
        perftest = "ib_send_bw -c UD -s 1024 -p 18930"
        ctx.sh("vm2", f"rm -f /tmp/foreign.out; (timeout 12 {perftest} -n {FOREIGN_SENDS} "
                      ">/tmp/foreign.out 2>&1) </dev/null >/dev/null 2>&1 &")
        listening = tcp_listening(18930)
        deadline = time.monotonic() + 10
        while not listening(ctx, "vm2", None):
            assert time.monotonic() < deadline, "ib_send_bw's server did not listen"
            time.sleep(0.3)
        # The client sends, then waits on the server's report, which never
        # comes: it runs in the background until the switch has counted
        # every send (or for 8 s), and both ends are ended then.
        ctx.sh("vm1", f"(timeout 8 {perftest} -n {FOREIGN_SENDS} --pkey_index={index} vm2 "
                      ">/tmp/foreign-client.out 2>&1) </dev/null >/dev/null 2>&1 &")
        deadline = time.monotonic() + 8
        after = _constraint_errors(ctx, "vm2")
        while after[0] - before[0] < FOREIGN_SENDS and time.monotonic() < deadline:
            time.sleep(0.2)
            after = _constraint_errors(ctx, "vm2")
        guid, port = _cable(ctx, "vm2")
        print(f"{FOREIGN_SENDS} UD sends with P_Key {0x8000 | RED:#06x} from vm1 to vm2: "
              f"PortXmitConstraintErrors of switch {guid:#x} port {port} "
              f"{before[0]} -> {after[0]}")
        assert after[0] - before[0] >= FOREIGN_SENDS, (
            f"the switch dropped {after[0] - before[0]} of {FOREIGN_SENDS}:\n"
            + ctx.run("vm1", ["cat", "/tmp/foreign-client.out"], check=False).out)
        # A server that had the sends would print its row at once: a second
        # more, then it is ended and must have printed none.
        time.sleep(1)
        for vm in ("vm1", "vm2"):
            ctx.sh(vm, f"pkill -f '^{perftest}'; "
                       f"while pgrep -f '^{perftest}' >/dev/null; do sleep 0.1; done",
                   timeout=30)
        received = ctx.run("vm2", ["cat", "/tmp/foreign.out"], check=False).out
        assert not re.search(r"^\s*1024\s+\d+\s", received, re.M), (
            f"vm2 received the foreign packets:\n{received}")
    finally:
        for vm in vms:
            ctx.sh(vm, "for k in 0x8001 0x8002; do echo $k > /sys/class/net/ib0/delete_child; "
                       "done 2>/dev/null; true", check=False)
        ctx.sh("vm1", f"rm -f {PARTITIONS_CONF}")
        _usual_sm(ctx)


def test_a_standby_sm_takes_over_with_traffic_running(ctx):
    """opensm in vm1 (priority 15) is master, opensm in vm2 (priority 1)
    standby. vm1's is killed while pib-traffic runs RC to vm2 (from vm3,
    or from vm1 on two VMs); vm2's becomes master (sminfo from the client
    names it) within its polling time, every port stays ACTIVE, and the
    traffic ends with every byte checked, the same at both ends."""
    vms = _vms(ctx)
    client = vms[2] if len(vms) > 2 else "vm1"
    vm2_lid = _lid(ctx, "vm2")
    traffic = None
    try:
        fabric.stop_sm(ctx.fabric)
        _start_sm(ctx, "vm1", "sm_priority 15\n" + FAILOVER_CONF)
        fabric.wait_active(ctx.fabric)
        _start_sm(ctx, "vm2", "sm_priority 1\n" + FAILOVER_CONF)
        deadline = time.monotonic() + 60
        while "SMINFO_STANDBY" not in ctx.run(client, ["sminfo", str(vm2_lid)],
                                              check=False).out:
            assert time.monotonic() < deadline, ctx.run("vm2", ["tail", "/run/opensm.log"]).out
            time.sleep(1)
        traffic = BackgroundTraffic(ctx, ["-t", "send,write,read", "-q", "2",
                                          "-s", "4097,65536,1M+3", "-n", "20", "-S", "34"],
                                    18940, client_vm=client, server_vm="vm2")
        time.sleep(2)
        killed = time.monotonic()
        _kill_sm(ctx, "vm1")
        master = ""
        while "SMINFO_MASTER" not in master or f"sm lid {vm2_lid} " not in master:
            assert time.monotonic() - killed < FAILOVER_LIMIT_S, (
                f"no new master after {FAILOVER_LIMIT_S} s: {master}\n"
                + ctx.run("vm2", ["tail", "-20", "/run/opensm.log"]).out)
            time.sleep(0.5)
            master = ctx.run(client, ["sminfo"], check=False).out
        took = time.monotonic() - killed
        states = fabric.port_states(ctx.fabric)
        states.update(fabric.switch_port_states(ctx.fabric))
        assert all("ACTIVE" in s for s in states.values()), states
        rc, out, src, sout = traffic.wait()
        traffic = None
        assert rc == 0 and src == 0, f"client {rc}, server {src}\n{out}\n{sout}"
        lines = same_at_both_ends(out, sout)
        print(f"vm2's opensm master {took:.1f} s after vm1's was killed ({master.strip()}); "
              f"every port ACTIVE; {sum(int(line['bytes']) for line in lines.values())} bytes "
              f"of RC traffic {client} -> vm2 through the takeover, SHA-256 equal at both ends")
    finally:
        if traffic is not None:
            traffic.wait()
        _usual_sm(ctx)
