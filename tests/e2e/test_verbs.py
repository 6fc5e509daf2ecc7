"""User-space verbs through the provider: ibv_devinfo and the pyverbs
tests that need no ACTIVE port."""

import re

import pytest

import pyverbs_runs
from pibctl import odp_costs, qmp
from pibctl.pairs import ipoib_up, run_pair
from transfers import traffic

from guest_scripts import (DESTROY_QP_SCRIPT, OBJECTS_SCRIPT, RESIZE_CQ_SCRIPT, RESIZE_SRQ_SCRIPT,
                           TIMESTAMP_SCRIPT)


def test_ibv_devinfo_shows_the_device_attributes(ctx):
    for vm in ctx.fabric.vms:
        out = ctx.run(vm.name, ["ibv_devinfo", "-v", "-d", "pib_0"]).out
        guid = f"{vm.node_guid:016x}"
        expect = {
            "hca_id": "pib_0",
            "fw_ver": "0.1.0",
            "node_guid": ":".join(guid[i:i + 4] for i in range(0, 16, 4)),
            "vendor_id": "0x1234",
            "vendor_part_id": str(0x1B1B),
            "hw_ver": "0x1",
            "phys_port_cnt": "1",
            "max_qp": "4096",
            "max_qp_wr": "16384",
            "max_sge": "32",
            "max_cq": "4096",
            "max_cqe": "4194304",
            "max_mr": "65536",
            "max_pd": "65536",
            "max_srq": "4096",
            "max_srq_wr": "16384",
            "max_pkeys": "64",
            "local_ca_ack_delay": "15",
            "pkey_tbl_len": "64",
            "gid_tbl_len": "8",
            "link_layer": "InfiniBand",
            # The core clock (docs/prm.md §2): 1 GHz, 64 bits.
            "hca_core_clock": "1000000kHZ",
            "completion timestamp_mask": "0xffffffffffffffff",
            # Completion event moderation (docs/prm.md §6.1).
            "max_cq_count": "65535",
            "max_cq_period": "4095",
        }
        for key, value in expect.items():
            m = re.search(rf"^\s*{key}:\s*(\S+)", out, re.M)
            assert m and m.group(1) == value, f"{key}: {m and m.group(1)} != {value}\n{out}"
        assert re.search(r"state:\s*PORT_ACTIVE", out), out
        # What the device implements, it advertises (docs/prm.md §4.5).
        for flag in ("BAD_PKEY_CNTR", "BAD_QKEY_CNTR", "PORT_ACTIVE_EVENT", "RC_RNR_NAK_GEN",
                     "MEM_WINDOW", "MEM_MGT_EXTENSIONS", "MEM_WINDOW_TYPE_2B",
                     "SYS_IMAGE_GUID", "XRC"):
            assert re.search(rf"^\s+{flag}$", out, re.M), f"{flag} not advertised:\n{out}"
        # IBA 1.5's FLUSH to global visibility and ATOMIC WRITE (§7.4):
        # bits 38 and 40, which ibv_devinfo has no names for; persistence
        # (39) is not offered.
        flags = int(re.search(r"device_cap_flags_ex:\s*0x([0-9a-fA-F]+)", out).group(1), 16)
        assert flags >> 38 & 0b111 == 0b101, hex(flags)
        assert int(re.search(r"port_lid:\s*(\d+)", out).group(1)) > 0, out
        assert re.search(r"GID\[\s*0\]:\s*fe80:0000:0000:0000:" +
                         ":".join(f"{vm.node_guid + 1:016x}"[i:i + 4] for i in range(0, 16, 4)), out), out


# Why pyverbs tests may skip on pib_0, and nothing else: a new reason
# (say, "No supported port is up") fails the test.
PYVERBS_SKIPS = {
    # Other hardware, other link layers, other hosts' setups.
    # (mlx5dv's clock information turns mlx5 timestamps into nanoseconds;
    # pib's are nanoseconds already, docs/prm.md §2.)
    r"non MLX5 device|not an MLX5 device|non EFA device|"
    r"Converting timestamp to nanoseconds is not supported": "vendor-specific tests",
    r"renderD128|cuda-python|PCI device must be passed": "needs hardware or setup a guest has not",
    r"Ethernet link layer|skip RoCE test": "RoCE and raw Ethernet tests",
    r"All gid indices populated": "the test's own precondition",
    # Not offered by pib-hca: the capability is 0 and the verb EOPNOTSUPP.
    r"Device memory|real time|Importing a device": "not offered",
    # What the device does not offer (docs/prm.md §8), asked for through
    # the extended verbs: wall-clock timestamps, tag matching's CQs.
    r"Extended CQ is not supported": "not offered (extended verbs)",
}


# pyverbs' test_atomic_invalid_lkey posts a WQE with a bad L_Key on purpose.
pytestmark = pytest.mark.guest_errors_expected("wqe-bad-key")

# Tests that must pass on pib_0, by their exact names: the traffic tests
# (RC, UD, SRQ, atomics, CQ events, rdma_cm) run, not skip.
PYVERBS_MUST_PASS = (
    "test_atomic_fetch_and_add", "test_atomic_invalid_rkey", "test_cq_events_rc",
    "test_rdmacm_sync_traffic", "test_rdmacm_async_multicast_traffic", "test_cq_events_ud",
    "test_ro_rc_traffic", "test_rc_srq_traffic", "test_qp_ex_rc_send", "test_qp_ex_rc_rdma_read",
    "test_qp_ex_ud_send", "test_create_cq_ex",
    # Memory windows (docs/prm.md §6.7): bound, used, invalidated.
    "test_mw_type1", "test_invalidate_mw_type1", "test_mw_type2", "test_mw_type2_invalidate_local",
    "test_mw_type2_invalidate_remote", "test_mw_type2_invalidate_dealloc",
    "test_qp_ex_rc_bind_mw",
    # XRC (§6.8): domains, XRC SRQs, send and receive QPs, traffic and atomics.
    "test_xrc_traffic_cq_ex", "test_xrc_atomic_fetch_and_add", "test_xrc_atomic_cmp_and_swap",
    "test_qp_ex_xrc_send", "test_qp_ex_xrc_send_imm",
    # CQ resize (§6.1) and reregistration in place (§6.2).
    "test_resize_cq", "test_resize_srq", "test_mr_rereg_access", "test_mr_rereg_access_bad_flow",
    "test_mr_rereg_atomic", "test_mr_rereg_pd", "test_mr_rereg_addr",
    # IBA 1.5 (§7.4): ATOMIC WRITE, FLUSH to global visibility over a range
    # and a region, and FLUSH for persistence refused (REM_ACCESS_ERR).
    "test_qp_ex_rc_atomic_write", "test_qp_ex_rc_flush", "test_qp_ex_rc_flush_type_violate",
    # Parent domains (§3.2): rings from the application's allocator, or the
    # provider's when it says so; an extended CQ and an SRQ on one.
    "test_without_allocators_rc_traffic", "test_default_allocators_rc_traffic",
    "test_mem_align_rc_traffic", "test_mem_align_ud_traffic",
    "test_mem_align_srq_excq_rc_traffic",
    # On-demand paging (§6.9): RC SENDs, WRITEs, READs and atomics, UD
    # SENDs and XRC SENDs into SRQs, through regions
    # whose pages the test drops (madvise DONTNEED) before every message:
    # each access faults, the driver maps the pages and resumes; regions
    # prefetched (ibv_advise_mr) and of huge pages.
    "test_odp_rc_traffic", "test_odp_rc_mixed_mr", "test_odp_rc_atomic_cmp_and_swp",
    "test_odp_rc_atomic_fetch_and_add", "test_odp_rc_rdma_read", "test_odp_rc_rdma_write",
    "test_odp_ud_traffic", "test_odp_xrc_traffic", "test_odp_sync_prefetch_rc_traffic",
    "test_odp_async_prefetch_rc_traffic", "test_odp_prefetch_sync_no_page_fault_rc_traffic",
    "test_odp_prefetch_async_no_page_fault_rc_traffic", "test_odp_rc_huge_traffic",
    "test_odp_rc_huge_user_addr_traffic",
    # Implicit on-demand paging (§6.10): one region over the whole address
    # space, its spans' children made as the device faults on them or a
    # prefetch reaches them.
    "test_odp_implicit_rc_traffic", "test_odp_implicit_sync_prefetch_rc_traffic",
    "test_odp_implicit_async_prefetch_rc_traffic")


# Tests that skip with a reason too general to allow for all: by name.
PYVERBS_SKIPPED_TESTS = {
    # mlx5's UDP source port asks for a RoCE v2 GID; an IB port has none,
    # so pyverbs finds "no supported port".
    "test_mlx5_udp_sport.": "vendor-specific, RoCE v2 only",
}


def test_pyverbs_whole_suite(ctx):
    ipoib_up(ctx, ["vm1"])  # the rdmacm tests use ib0's address
    outs = pyverbs_runs.run(ctx, ["vm1", "vm2"], "pib_0")
    pyverbs_runs.check(outs, PYVERBS_SKIPS, PYVERBS_SKIPPED_TESTS, PYVERBS_MUST_PASS, 70)


def test_on_demand_paging_costs(ctx):
    """What on-demand paging costs on pib_0 (docs/prm.md §6.9): ib_write_bw
    of 1 MiB messages over pinned memory, then over on-demand regions
    (--odp), whose pages the devices fault on and the drivers map; every
    fault raised is resumed, and the figures are printed."""
    c = odp_costs.measure(ctx, "pib_0", 18870, "vm2", "vm1")
    print(odp_costs.shown(c, "pib_0"))
    assert c.faults > 0 and c.resumed == c.faults, c


MODERATION_EVENTS = ("pib_hca_cq_moderate", "pib_hca_cq_event_held", "pib_hca_cq_event_period")


def _trace_moderation(ctx, vms, on):
    for vm in vms:
        for name in MODERATION_EVENTS:
            qmp.command(ctx.fabric.vm(vm).path / "qmp.sock", "trace-event-set-state", name=name,
                        enable=on)


def test_moderated_completion_events(ctx):
    """Completions taken by events (ibv_get_cq_event) on CQs whose events
    ibv_modify_cq moderates (docs/prm.md §6.1): every operation still
    completes and moves every byte. Rounds wait for their completion one
    at a time, so each event comes when the moderation period ends: an
    event the device held and never let go would end the run in a
    timeout. A period beyond the device's limit is refused by the driver,
    and ib_core moderates its own CQs adaptively (rdma_dim)."""
    logs = {vm: ctx.fabric.vm(vm).qemu_log for vm in ("vm1", "vm2")}
    start = {vm: log.stat().st_size for vm, log in logs.items()}
    _trace_moderation(ctx, logs, True)
    try:
        lines = traffic(ctx, ["-t", "send,write-imm,read,ud-send", "-q", "2", "-s",
                              "7,4096,65536", "-n", "3", "-S", "7", "--events", "4,300", "-w",
                              "30"], port=18860)
    finally:
        _trace_moderation(ctx, logs, False)
    for name, line in lines.items():
        assert line["events"] is not None and int(line["events"]) > 0, (name, line)
    print("  " + ", ".join(f"{name} {line['messages']} messages, {line['events']} events"
                           for name, line in lines.items()))
    # Each device took the moderation of its 8 CQs, held events and let
    # them go when the period ended (the traces of docs/prm.md §9).
    for vm, log in logs.items():
        with log.open("rb") as f:
            f.seek(start[vm])
            trace = f.read().decode(errors="replace")
        moderated = len(re.findall(r"CQ \d+: completion events wait for 4 CQEs or 300 us", trace))
        held = len(re.findall(r"CQ \d+: its completion event waits for 4 CQEs or 300 us", trace))
        period = len(re.findall(r"CQ \d+: moderation period over", trace))
        print(f"  {vm}: {moderated} CQs moderated, {held} events held, {period} let go "
              "when their period ended")
        assert moderated >= 8 and held >= 1 and period >= 1, trace[-3000:]
    refused = ["pib-traffic", "-p", "18861", "-t", "send", "--events", "1,5000"]
    result, _, _ = run_pair(ctx, refused[:3], refused, port=18861, timeout=60)
    said = "ibv_modify_cq(1, 5000 us): Invalid argument"
    assert result.exitcode != 0 and said in result.err + result.out, (result.out, result.err)
    dev = ctx.run("vm1", ["rdma", "-d", "dev", "show", "pib_0"]).out
    assert "adaptive-moderation on" in dev, dev
    # ib_core's own CQs (the MAD agents') are polled from a workqueue: DIM runs on them.
    cqs = ctx.run("vm1", ["rdma", "res", "show", "cq", "dev", "pib_0"]).out
    assert re.search(r"poll-ctx WORKQUEUE adaptive-moderation on comm \[ib_core\]", cqs), cqs


def test_resize_cq_moves_waiting_completions(ctx):
    """ibv_resize_cq with completions not yet polled: the provider moves
    them to the new ring; none is lost or repeated, the order holds, and a
    ring too small for what waits is refused (docs/prm.md §6.1)."""
    out = ctx.run("vm1", ["python3", "-"], stdin=RESIZE_CQ_SCRIPT.encode()).out
    print(out.rstrip())
    for line in ("polled before 2", "grew to 32 with 4 waiting", "polled after 24", "shrank to 4",
                 "too small: refused EINVAL", "polled last 4", "extra 0", "in order True",
                 "bytes equal True"):
        assert re.search(rf"^{re.escape(line)}$", out, re.M), f"{line!r} missing:\n{out}"


def test_a_destroyed_qp_leaves_no_completion_behind(ctx):
    """ibv_destroy_qp drops the completions the QP left unpolled in a CQ it
    shares, and keeps the other QP's, in order, as mlx5's provider does
    (found by fi_pingpong: libfabric's RxM flushes its CQ after closing a
    connection, and took a receive completion into an endpoint it had
    freed)."""
    out = ctx.run("vm1", ["python3", "-"], stdin=DESTROY_QP_SCRIPT.encode()).out
    print(out.rstrip())
    for line in ("polled 8", "of the destroyed QP 0", "the other's in order True",
                 "all successful True"):
        assert re.search(rf"^{re.escape(line)}$", out, re.M), f"{line!r} missing:\n{out}"


def test_resize_srq_keeps_the_waiting_receives(ctx):
    """ibv_modify_srq(IBV_SRQ_MAX_WR) while WQEs are posted, some taken and
    their completions not yet polled: every receive completes once, in the
    order posted, into its own buffer (docs/prm.md §6.4)."""
    out = ctx.run("vm1", ["python3", "-"], stdin=RESIZE_SRQ_SCRIPT.encode()).out
    print(out.rstrip())
    for line in ("polled before 1", "max_wr now 16", "polled after 15", "in order True",
                 "bytes equal True"):
        assert re.search(rf"^{re.escape(line)}$", out, re.M), f"{line!r} missing:\n{out}"


def test_completion_timestamps_come_from_the_core_clock(ctx):
    """ibv_query_rt_values_ex reads the device's clock from user space, and
    an extended CQ that asks for timestamps gets the core clock of each
    completion's writing (docs/prm.md §2, §7.3)."""
    out = ctx.run("vm1", ["python3", "-"], stdin=TIMESTAMP_SCRIPT.encode()).out
    print(out.rstrip())
    for line in ("hca_core_clock 1000000", "timestamp_mask 0xffffffffffffffff",
                 "completions 16", "within the clock reads True", "after their post True",
                 "sends in order True", "bytes equal True",
                 "wallclock: refused ENOTSUP"):  # Linux's EOPNOTSUPP, by its first name
        assert re.search(rf"^{re.escape(line)}$", out, re.M), f"{line!r} missing:\n{out}"
    # The clock counts nanoseconds of the VM's time: half a second of the
    # guest's monotonic clock is half a second of the device's.
    ratio = float(re.search(r"^clock/guest ratio (\S+)$", out, re.M).group(1))
    assert 0.8 <= ratio <= 1.25, out


def test_debugfs_lists_user_objects_until_destroyed(ctx):
    base = {}
    for name in ("pd", "mr", "cq", "qp", "srq"):
        lines = ctx.run("vm1", ["cat", f"/sys/kernel/debug/pib/pib_0/{name}"]).out.splitlines()
        base[name] = len(lines) - 1
    out = ctx.run("vm1", ["python3", "-"], stdin=OBJECTS_SCRIPT.encode()).out
    counts = {(tag, name): int(n) for tag, name, n in re.findall(r"^(live|gone) (\w+) (\d+)$", out, re.M)}
    for name in base:
        assert counts[("live", name)] == base[name] + 1, (name, out)
        assert counts[("gone", name)] == base[name], (name, out)
    assert re.search(r"state 1$", out, re.M), out  # INIT
