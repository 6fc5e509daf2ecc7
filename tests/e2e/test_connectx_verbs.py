"""User space on the ConnectX personality (issue 31): Debian's own
libibverbs and libmlx5, unmodified, post WQEs and poll CQEs in ConnectX's
formats on the rings mlx5_ib maps for them, ring the UAR pages and
BlueFlame registers of BAR0, and talk to a pib-hca guest (vm1, whose
provider is ours) and to a second ConnectX guest (vm3). Every program
checks its data: the pingpongs with -c (each received buffer compared
with what its peer wrote), ibv_xsrq_pingpong's "success", rping -V,
librdmacm's examples' "data transfers complete". UCX's rc_mlx5 and
ud_mlx5 run between the two ConnectX guests, and MPICH over them."""

import re
from pathlib import Path

import pytest

import pyverbs_runs
from mpi_runs import mpi_check
from odp_runs import ucx_and_mpi_on_demand
from pibctl import odp_costs, qmp
from pibctl.hpc import ucx_perftest
from pibctl.pairs import (PERFTEST, ipoib_up, output_contains, perftest, perftest_figure,
                          perftest_shown, rdma_cm_listening, run_pair)
from transfers import traffic

# pyverbs's test_atomic_invalid_lkey posts a WQE with a bad L_Key on
# purpose (as do the DCI stream tests' bad flows), its test_resize_cq asks
# for a ring smaller than the CQEs waiting in it, which the device refuses
# (docs/mlx5.md §8) and mlx5_core logs, its test_mkey_list_bad_flow
# sends more than its indirect key holds (§10.4), and its
# test_dc_send_stream_bad_flow resets a DCI stream that is not in error,
# to see it refused (§15.4).
pytestmark = [
    pytest.mark.topology("connectx.topo"),
    pytest.mark.guest_errors_expected("wqe-bad-key", "mlx5-qp-bad-attr"),
    pytest.mark.kernel_log_expected("MODIFY_CQ(0x403) op_mod(0x1) failed, status bad parameter(0x3), "
                                    "syndrome (0x50bd34e9)"),
]

# (server, client): the ConnectX serving the pib-hca, the other way, and
# two ConnectX guests.
PAIRS = (("vm2", "vm1"), ("vm1", "vm2"), ("vm3", "vm2"))
HCA = {"vm1": "pib", "vm2": "mlx5", "vm3": "mlx5"}
SIZES = (1, 4096, 65536)


def _name(server, client):
    return f"{HCA[client]} ({client}) -> {HCA[server]} ({server})"


def _check(argv, client, server_out, rc):
    assert client.exitcode == 0 and rc == "0", (
        f"{' '.join(argv)}: client {client.exitcode}, server {rc}\n"
        f"client:\n{client.out[-3000:]}{client.err[-2000:]}\nserver:\n{server_out[-3000:]}")


def _pingpong(ctx, prog, size, iters, server, client, extra=(), port=18600):
    argv = [prog, "-s", str(size), "-n", str(iters), "-p", str(port), "-c", *extra]
    result, server_out, rc = run_pair(ctx, argv, argv, port=port, server_vm=server,
                                      client_vm=client)
    _check(argv, result, server_out, rc)
    m = re.search(r"(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter", result.out)
    assert m and int(m.group(1)) == iters, result.out
    return float(m.group(3))


def _pingpongs(ctx, prog, sizes, extra=()):
    for server, client in PAIRS:
        times = [_pingpong(ctx, prog, size, 20, server, client, extra) for size in sizes]
        print(f"{prog} {_name(server, client)}: " + ", ".join(
            f"{size} B {t:.0f} us" for size, t in zip(sizes, times)) + ", every buffer checked")


def test_rc_pingpong(ctx):
    _pingpongs(ctx, "ibv_rc_pingpong", SIZES)
    _pingpongs(ctx, "ibv_rc_pingpong", (4096,), extra=["-e"])


# The normal path's trace events (docs/prm.md §9.1), both personalities'.
PATH_EVENTS = ("pib_hca_doorbell", "pib_hca_wqe_fetched", "pib_hca_recv_wqe_fetched",
               "pib_hca_packet_sent", "pib_hca_packet_received", "pib_hca_cqe_written",
               "pib_hca_eqe_written", "pib_hca_mlx5_sq_doorbell", "pib_hca_mlx5_rq_record")


def _trace_path(ctx, vms, on):
    for vm in vms:
        for name in PATH_EVENTS:
            qmp.command(ctx.fabric.vm(vm).path / "qmp.sock", "trace-event-set-state",
                        name=name, enable=on)


def _first_line(lines, pattern, after=-1):
    """The index of the first line after `after` that matches `pattern`."""
    for i in range(after + 1, len(lines)):
        if re.search(pattern, lines[i]):
            return i
    raise AssertionError(f"no trace line /{pattern}/ after line {after}:\n" +
                         "\n".join(lines[max(after, 0):][:40]))


def _follow_send(lines, qpn, peer, doorbell):
    """The trace of the first SEND of QP `qpn` to QP `peer`, in order: its
    doorbell, its WQE fetched, its first packet sent, and its CQE."""
    rung = _first_line(lines, doorbell)
    fetched = _first_line(lines, rf"QP {qpn}: send WQE \d+ fetched: opcode 0, 2000 bytes, status 0",
                          rung)
    sent = _first_line(lines, rf"sent opcode 0x0[04] PSN \d+ to QP {peer},", fetched)
    done = _first_line(lines, rf"CQE \d+ for QP {qpn} WQE \d+: opcode 0 status 0, 2000 bytes",
                       sent)
    return [lines[i] for i in (rung, fetched, sent, done)]


def test_one_send_followed_in_the_trace(ctx):
    """With the normal path's trace events on (docs/prm.md §9.1), one SEND
    of ibv_rc_pingpong from the pib-hca (vm1) to the ConnectX (vm2) and its
    answer are followed in each QEMU's trace: the doorbell, the WQE
    fetched, its packet sent, received by the peer, the receive WQE it
    took, and both CQEs."""
    server, client = "vm2", "vm1"
    logs = {vm: ctx.fabric.vm(vm).qemu_log for vm in (server, client)}
    start = {vm: log.stat().st_size for vm, log in logs.items()}
    argv = ["ibv_rc_pingpong", "-s", "2000", "-n", "1", "-p", "18620", "-c"]
    _trace_path(ctx, logs, True)
    try:
        result, server_out, rc = run_pair(ctx, argv, argv, port=18620, server_vm=server,
                                          client_vm=client)
    finally:
        _trace_path(ctx, logs, False)
    _check(argv, result, server_out, rc)
    qpns = [int(q, 16) for q in re.findall(r"(?:local|remote) address:.*QPN 0x([0-9a-f]+)",
                                            result.out)]
    assert len(qpns) == 2, result.out
    mine, theirs = qpns
    lines = {}
    for vm, log in logs.items():
        with log.open("rb") as f:
            f.seek(start[vm])
            lines[vm] = f.read().decode(errors="replace").splitlines()
    sender = _follow_send(lines[client], mine, theirs, rf"doorbell page \d+: SQ of QP {mine}, index")
    arrived = _first_line(lines[server], rf"received opcode 0x0[04] PSN \d+ for QP {theirs},")
    taken = _first_line(lines[server], rf"QP {theirs}: receive WQE \d+ fetched", arrived)
    received = _first_line(lines[server],
                           rf"CQE \d+ for QP {theirs} WQE \d+: opcode 128 status 0, 2000 bytes",
                           taken)
    answer = _follow_send(lines[server], theirs, mine, rf"ConnectX UAR \d+: QP {theirs} SQ doorbell")
    print(f"vm1 (pib-hca) QP {mine} -> vm2 (ConnectX) QP {theirs}, one SEND each way:")
    for line in sender + [lines[server][i] for i in (arrived, taken, received)] + answer:
        print("  " + line.strip()[-150:])


def test_srqs_made_and_destroyed_by_two_processes_at_once(ctx):
    """Two processes of a ConnectX guest make and destroy SRQs as fast as
    they can (srq_churn.py): every destroy succeeds and the kernel log
    stays clean. A device that gave a destroyed SRQ's number again at once
    loses mlx5_ib one of the other process's SRQs (docs/mlx5.md §9)."""
    script = (Path(__file__).parent / "srq_churn.py").read_bytes()
    ctx.run("vm3", ["sh", "-c", "cat >/tmp/srq_churn.py"], stdin=script)
    out = ctx.sh("vm3", "for i in 1 2; do (python3 /tmp/srq_churn.py mlx5_0 300 >/tmp/srq_churn.$i 2>&1; "
                        "echo \"exit $?\" >>/tmp/srq_churn.$i) & done; wait; "
                        "cat /tmp/srq_churn.1 /tmp/srq_churn.2", timeout=300).out
    print(out)
    assert out.count("300 SRQs made and destroyed\nPASS\nexit 0") == 2, out


def test_uc_pingpong(ctx):
    _pingpongs(ctx, "ibv_uc_pingpong", SIZES)


def test_ud_pingpong(ctx):
    _pingpongs(ctx, "ibv_ud_pingpong", (1, 1024, 2048))


def test_srq_pingpong(ctx):
    _pingpongs(ctx, "ibv_srq_pingpong", SIZES)


def test_xsrq_pingpong(ctx):
    for server, client in PAIRS:
        for size, extra in ((1, []), (65536, ["-e"])):
            argv = ["ibv_xsrq_pingpong", "-s", str(size), "-n", "20", "-p", "18601", *extra]
            result, server_out, rc = run_pair(ctx, argv, argv, port=18601, server_vm=server,
                                              client_vm=client)
            _check(argv, result, server_out, rc)
            assert re.search(r"^success$", result.out, re.M), result.out
            assert re.search(r"^success$", server_out, re.M), server_out
        print(f"ibv_xsrq_pingpong {_name(server, client)}: 1 B and 65536 B (events), success")


# perftest from a ConnectX, to the pib-hca and to the other ConnectX
# (test_datapath.py has pib-hca to pib-hca).
PERFTEST_PAIRS = (("vm1", "vm2"), ("vm3", "vm2"))


def test_perftest(ctx):
    rows = []
    for prog, args, kind in PERFTEST:
        cells = []
        for server, client in PERFTEST_PAIRS:
            argv = perftest(prog, *args, "-p", "18602")
            result, server_out, rc = run_pair(ctx, argv, argv, port=18602, server_vm=server,
                                              client_vm=client)
            _check(argv, result, server_out, rc)
            cells.append(perftest_figure(result, kind))
        rows.append((prog, kind, cells))
    print(f"{'':14} " + " ".join(f"{_name(s, c):>28}" for s, c in PERFTEST_PAIRS))
    for prog, kind, cells in rows:
        unit = "MiB/s" if kind == "bw" else "us"
        print(f"{prog:<14} " + " ".join(f"{perftest_shown(v, unit):>28}" for v in cells))


# The responder's Q counters (docs/mlx5.md §4.6; pib-hca's QUERY_COUNTERS
# under the same names) and the pib-traffic tests whose messages each counts.
RESPONDER_COUNTERS = {"rx_write_requests": ("write", "write-imm", "uc-write"),
                      "rx_read_requests": ("read",), "rx_atomic_requests": ("cas", "fadd")}


def _hw_counters(ctx, vm):
    device = "pib_0" if HCA[vm] == "pib" else "mlx5_0"
    out = ctx.sh(vm, f"cd /sys/class/infiniband/{device}/ports/1/hw_counters && "
                     f"grep -H . {' '.join(RESPONDER_COUNTERS)}").out
    return {name: int(value) for name, value in
            (line.split(":", 1) for line in out.split())}


def test_pib_traffic_every_operation(ctx):
    """pib-traffic (built against rdma-core, so on either provider): every
    operation, 0 B to 1 MiB at unaligned offsets, on two QPs at once, every
    byte checked where it lands and both ends' SHA-256 equal. The server's
    hardware counters count each WRITE, READ and atomic it took, once."""
    for server, client in PAIRS:
        before = _hw_counters(ctx, server)
        lines = traffic(ctx, ["-q", "2", "-s", "0,1,4097,65536,1M+3", "-n", "2", "-S", "31"],
                        port=18610, client_vm=client, server_vm=server)
        grown = {name: value - before[name] for name, value in _hw_counters(ctx, server).items()}
        taken = {name: sum(int(lines[test]["messages"]) for test in tests if test in lines)
                 for name, tests in RESPONDER_COUNTERS.items()}
        assert grown == taken, f"{server}'s counters grew by {grown}; it took {taken}"
        total = sum(int(line["bytes"]) for line in lines.values())
        print(f"pib-traffic {_name(server, client)}: {len(lines)} operations, {total} bytes, "
              f"SHA-256 equal at both ends; {server}'s counters grew by {grown}")


def _ipoib_up(ctx):
    """IPoIB on the three guests the rdma_cm pairs use, once per test:
    earlier tests may have reloaded a driver, and nothing in these does."""
    ipoib_up(ctx, ("vm1", "vm2", "vm3"))


def _cm_pair(ctx, server_argv, client_argv, port, server, client, ready, address=None):
    """The client's last argument: `address`, by default the server's IPoIB
    address (the test has brought IPoIB up first: _ipoib_up)."""
    result, server_out, rc = run_pair(ctx, server_argv, client_argv, port=port, ready=ready,
                                      address=address or f"{server}-ib", server_vm=server,
                                      client_vm=client)
    _check(client_argv, result, server_out, rc)
    return result.out, server_out


def test_rdma_cm_rping_ucmatose_udaddy(ctx):
    """rdma_cm over the guests' IPoIB addresses: rping -V (each side checks
    every byte of its RDMA READ and WRITE buffers), ucmatose (RC) and
    udaddy (UD), whose every message must arrive ('data transfers
    complete')."""
    _ipoib_up(ctx)
    for server, client in PAIRS:
        args = ["-V", "-C", "10", "-S", "4096"]
        out, _ = _cm_pair(ctx, ["rping", "-s", "-a", "0.0.0.0", "-p", "7180", *args],
                          ["rping", "-c", "-p", "7180", *args, "-a"], 7180, server, client,
                          rdma_cm_listening(7180))
        assert "error" not in out.lower(), out
        # ucmatose takes a port; udaddy's -p is a port space, its port 7174.
        for prog, size, port, options in (("ucmatose", 4096, 7181, ["-p", "7181"]),
                                          ("udaddy", 1024, 7174, [])):
            argv = [prog, *options, "-c", "2", "-C", "10", "-S", str(size)]
            for text in _cm_pair(ctx, argv, [*argv, "-s"], port, server, client,
                                 rdma_cm_listening(port)):
                assert "data transfers complete" in text and "return status 0" in text, text
        print(f"rdma_cm {_name(server, client)}: rping -V 10 x 4096 B, ucmatose 2 x 10 x 4096 B, "
              "udaddy 2 x 10 x 1024 B, every message arrived")


def test_rdma_cm_mckey(ctx):
    """A multicast group joined through the SA: the server joins and
    waits for 10 messages, the client joins as a sender (bound to its own
    IPoIB address) and sends them."""
    _ipoib_up(ctx)
    for server, client in PAIRS:
        args = ["-m", "239.1.2.4", "-C", "10", "-S", "1024"]
        out, server_out = _cm_pair(ctx, ["stdbuf", "-oL", "mckey", *args, "-b", f"{server}-ib"],
                                   ["mckey", *args, "-s", "-b"], 18580, server, client,
                                   output_contains("joined"), address=f"{client}-ib")
        for text in (out, server_out):
            assert "data transfers complete" in text and "return status 0" in text, text
        print(f"mckey {_name(server, client)}: 10 multicast messages of 1024 bytes")


def _ucx_transports(ctx, vm, device):
    """The transports `ucx_info -d` lists on `device`, in its order."""
    out = ctx.run(vm, ["ucx_info", "-d"]).out
    found, transport = [], None
    for line in out.splitlines():
        m = re.match(r"^#\s+(Transport|Device): (\S+)$", line)
        if m and m.group(1) == "Transport":
            transport = m.group(2)
        elif m and m.group(2) == device and transport not in found:
            found.append(transport)
    return found


def test_ucx_over_rc_mlx5_ud_mlx5_and_dc_mlx5(ctx):
    """UCX's accelerated transports, which write ConnectX WQEs and read
    its CQEs themselves, between the two ConnectX guests: ucx_perftest's
    tag latency and bandwidth over each. dc_mlx5 is listed once UCX's own
    probe (a DCT made, taken to RTR and destroyed, which waits for
    DCT_DRAINED) passed, and runs over one DCI per peer's DCT
    (docs/mlx5.md §15)."""
    for vm in ("vm2", "vm3"):
        listed = _ucx_transports(ctx, vm, "mlx5_0:1")
        assert {"rc_mlx5", "ud_mlx5", "dc_mlx5", "rc_verbs", "ud_verbs"} <= set(listed), listed
    print(f"ucx_info -d on mlx5_0:1: {', '.join(listed)}")
    for tls in ("rc_mlx5,ud_mlx5:aux", "ud_mlx5", "dc_mlx5"):
        for test, size, iters in (("tag_lat", 8, 200), ("tag_bw", 1 << 20, 40)):
            latency, bandwidth = ucx_perftest(ctx, tls, test, size, iters, device="mlx5_0:1",
                                              server_vm="vm3", client_vm="vm2")
            shown = f"{latency:.1f} us" if test.endswith("lat") else f"{bandwidth:.1f} MB/s"
            print(f"ucx_perftest {tls.split(',')[0]:<8} {test:<8} {size:>8} B: {shown}")


def test_mpich_over_rc_mlx5_with_ud_mlx5_aux(ctx):
    """MPICH over UCX between the two ConnectX guests, with UCX's
    accelerated RC for the data and UD for its wireup (ud_mlx5:aux), on 2
    and 4 ranks, every byte checked. UCX sends its UD control packets with
    an inline header followed by data segments in one WQE: the device once
    dropped the data segments, and the wireup died on a packet without its
    body (ud_ep.c's CREQ assertion)."""
    env = ("UCX_TLS=rc_mlx5,ud_mlx5:aux", "UCX_NET_DEVICES=mlx5_0:1")
    for ranks in (2, 4):
        mpi_check(ctx, "mpich", ranks, "ucx", hosts=("vm2", "vm3"), device="mlx5_0", env=env)


DC_ENV = ("UCX_TLS=dc_mlx5,self,sm", "UCX_NET_DEVICES=mlx5_0:1")


def test_openmpi_over_dc_mlx5_on_three_guests(ctx):
    """Open MPI over UCX's DC alone (UCX_TLS=dc_mlx5, its wireup too) on
    the three ConnectX guests, 3 ranks, every byte checked: each rank
    reaches the others through its DCIs, each guest's DCT takes the
    requests of every peer's (docs/mlx5.md §15)."""
    mpi_check(ctx, "openmpi", 3, "ucx", hosts=("vm2", "vm3", "vm4"), device="mlx5_0",
              env=DC_ENV)


@pytest.mark.soak  # ./pib test --soak: 30 pairs of ranks, 255 MB, 20 s under TCG
def test_openmpi_over_dc_mlx5_with_two_ranks_a_guest(ctx):
    """As above with 6 ranks: two in each guest, each with DCIs and a DCT
    of its own."""
    mpi_check(ctx, "openmpi", 6, "ucx", hosts=("vm2", "vm3", "vm4"), device="mlx5_0",
              env=DC_ENV)


def test_ucx_and_mpi_over_on_demand_registrations(ctx):
    """UCX's on-demand registration (odp_runs.py) between two ConnectX
    guests over rc_mlx5, against pinned memory, and Open MPI over it on
    the three, every byte checked (docs/mlx5.md §12)."""
    ucx_and_mpi_on_demand(ctx, "mlx5_0:1", "rc_mlx5,ud_mlx5:aux", "vm3", "vm2",
                          ("vm2", "vm3", "vm4"), 3)


# Why pyverbs tests may skip on mlx5_0 (vm2), and nothing else: a new
# reason fails the test. What the device does not offer is listed in
# docs/mlx5.md §11; each reason here says which.
MLX5_PYVERBS_SKIPS = {
    r"non EFA device|not an EFA": "vendor-specific tests of other hardware",
    r"renderD128|cuda-python|PCI device must be passed|Crypto login details":
        "needs hardware or setup a guest has not",
    r"Ethernet link layer|skip RoCE test": "RoCE and raw Ethernet tests",
    r"All gid indices populated": "the test's own precondition",
    r"Device memory|MEMIC|real time|custom mr with additional access flags|Importing a device|"
    r"IBV_ACCESS_FLUSH_GLOBAL|"
    r"Tag matching|DV QP OOO|"
    r"LAG affinity|Extended QP is not supported":
        "not offered: device memory, tag matching, out-of-order QPs, LAG, atomic write",
    r"CQE 128B compression|CQE 128B padding": "not offered: CQE compression and padding",
    r"UAR allocation \(with flag=0\)":
        "not offered: write combining (the device takes WQEs from memory, never from the "
        "blue-flame registers, and says so with bf 0: mlx5_ib refuses BF UARs)",
    r"VAR allocation": "not offered: virtio emulation (VAR doorbell pages)",
    r"schedule elements|Packet pacing": "not offered: transmit scheduling and packet pacing",
    r"NIC flow table": "not offered: NIC flow steering (Ethernet receive tables)",
    r"Create Mkey is not supported": "not offered: signature and crypto keys",
    r"Create Mlx5DV QP is not supported":
        "not offered: signature pipelining (drain_sigerr 0, so no SQD2RTS)",
    r"SRQ resize is not supported|UD QP with(out)? extended attrs":
        "what libmlx5 refuses itself: SRQ resize, UD QPs without extended attributes",
}
MLX5_PYVERBS_SKIPPED_TESTS = {
    "test_mlx5_udp_sport.": "RoCE v2 only",
}
# Left out of the run, each with why (docs/mlx5.md §13): none.
MLX5_PYVERBS_LEFT_OUT = ()
MLX5_PYVERBS_MUST_PASS = (
    # Indirect keys (§10.4): KLM lists and repeat blocks laid out by UMRs
    # from a process's QP, SENDs through them compared byte by byte at
    # both ends, a SEND beyond the key refused, LOCAL_INV and SEND with
    # Invalidate freeing them.
    "test_mkey_list", "test_mkey_list_new_api", "test_mkey_interleaved",
    "test_mkey_interleaved_new_api", "test_mkey_list_bad_flow", "test_mkey_remote_invalidate",
    # Memory windows (§10.5), bound by libmlx5's UMRs from the process's
    # QPs: type 1 bound and unbound, type 2 bound and freed by LOCAL_INV,
    # a peer's SEND with Invalidate and deallocation, each followed by
    # WRITEs through the window (refused once it is freed); a window bound
    # with local write alone refusing a peer's WRITE; type 3 refused.
    "test_mw_type1", "test_invalidate_mw_type1", "test_mw_type2",
    "test_mw_type2_invalidate_local", "test_mw_type2_invalidate_remote",
    "test_mw_type2_invalidate_dealloc", "test_reg_mw_wrong_type", "test_qp_ex_rc_bind_mw",
    # mlx5dv's CQs: 64- and 128-byte CQEs (docs/mlx5.md §8), with traffic.
    "test_dv_cq_cqe_size_128", "test_dv_cq_cqe_size_64", "test_dv_cq_traffic",
    # Verbs over libmlx5: CQ resize and extended CQs, RC, UD, SRQ, XRC,
    # atomics, CQ events, rdma_cm.
    "test_resize_cq", "test_create_cq_ex", "test_atomic_fetch_and_add", "test_cq_events_rc",
    "test_cq_events_ud", "test_rc_srq_traffic", "test_qp_ex_rc_send", "test_qp_ex_rc_rdma_read",
    "test_qp_ex_ud_send", "test_xrc_traffic_cq_ex", "test_rdmacm_sync_traffic",
    # Parent domains whose allocator puts a QP's rings at a 64-byte
    # multiple inside a page (docs/mlx5.md §10, §13).
    "test_mem_align_rc_traffic", "test_mem_align_ud_traffic", "test_mem_align_srq_excq_rc_traffic",
    # DC (docs/mlx5.md §15): a DCT and two DCIs on each side, SENDs into
    # the DCT's SRQ, RDMA WRITEs and as many fetch-and-adds as libmlx5's
    # max_dc_rd_atom, which it reads through DEVX (§16), every buffer
    # compared.
    "test_dc_send", "test_dc_rdma_write", "test_dc_atomic",
    # DCI streams (§15.4): WRITEs on streams in turn; SENDs whose errors
    # fail their streams alone, each stream reset and used again (a reset
    # of a stream not in error refused); and errors until the DCI fails,
    # at exactly its bound, then reset to RTS.
    "test_dc_rdma_write_stream", "test_dc_send_stream_bad_flow",
    "test_dc_send_stream_bad_flow_qp",
    # An AH mapped to a DCI (an AV_QP_MAPPING general object, §16.3), then
    # SENDs over it.
    "test_dc_ah_to_qp_mapping",
    # DEVX (§16): a CQ and two RC QPs made by DEVX commands in UMEMs, taken
    # to RTS by DEVX's modify, SEND with immediate between them.
    "test_devx_rc_qp_send_imm_traffic",
    # The same with SQs without a doorbell record, rung at UAR offset
    # 0x600 (§10.3).
    "test_devx_rc_qp_send_imm_doorbell_less_traffic",
    # DEVX's general objects (§16.3): 1,000 reserved QP numbers taken and
    # given back, with the bad flows; and rdma_cm connections whose
    # passive side names its DCT by a reserved number.
    "test_reservered_qpn", "test_rdmacm_async_traffic_dc_external_qp",
    # DMA copies (§10.2): a buffer copied and compared, a destination of
    # another PD or without local write refused, a copy beyond the
    # largest refused by libmlx5.
    "test_dma_memcpy_data", "test_dma_memcpy_different_pd_bad_flow",
    "test_dma_memcpy_protection_bad_flow", "test_dma_memcpy_large_data_bad_flow",
    # UD QPs made by ibv_create_qp_ex with random create flags,
    # IBV_QP_CREATE_BLOCK_SELF_MCAST_LB among them half the time
    # (block_lb_mc, §10).
    "test_create_ud_qp_ex_no_attr", "test_create_ud_qp_ex_with_attr",
    # On-demand paging (§10.6): RC SENDs, WRITEs, READs and atomics, UD
    # SENDs and XRC SENDs into SRQs, through regions whose pages the
    # test drops (madvise DONTNEED) before every message: each access
    # faults, the driver maps the page and resumes; prefetched regions
    # (ibv_advise_mr), huge pages, a DEVX QP's and a DC pair's; implicit
    # regions over the whole address space (§10.7), faulting on their
    # null keys and children, prefetched too.
    "test_odp_rc_traffic", "test_odp_rc_mixed_mr", "test_odp_rc_atomic_cmp_and_swp",
    "test_odp_rc_atomic_fetch_and_add", "test_odp_rc_rdma_read", "test_odp_rc_rdma_write",
    "test_odp_ud_traffic", "test_odp_xrc_traffic", "test_odp_sync_prefetch_rc_traffic",
    "test_odp_async_prefetch_rc_traffic", "test_odp_prefetch_sync_no_page_fault_rc_traffic",
    "test_odp_prefetch_async_no_page_fault_rc_traffic", "test_odp_rc_huge_traffic",
    "test_odp_rc_huge_user_addr_traffic", "test_devx_rc_qp_odp_traffic", "test_odp_dc_traffic",
    "test_odp_implicit_rc_traffic", "test_odp_implicit_sync_prefetch_rc_traffic",
    "test_odp_implicit_async_prefetch_rc_traffic")


def test_pyverbs_on_mlx5(ctx):
    """rdma-core's pyverbs suite in a ConnectX guest, on Debian's libmlx5:
    its verbs tests and its mlx5 tests where the device offers the
    feature, every skip's reason known."""
    ipoib_up(ctx, ["vm2"])  # the rdmacm tests use ib0's address
    outs = pyverbs_runs.run(ctx, ["vm2"], "mlx5_0", left_out=MLX5_PYVERBS_LEFT_OUT,
                            without_gc=True, per_guest=2)
    pyverbs_runs.check(outs, MLX5_PYVERBS_SKIPS, MLX5_PYVERBS_SKIPPED_TESTS,
                       MLX5_PYVERBS_MUST_PASS, 100)
    if MLX5_PYVERBS_LEFT_OUT:
        print(f"left out: {', '.join(MLX5_PYVERBS_LEFT_OUT)} (docs/mlx5.md §13)")


def test_on_demand_paging_costs(ctx):
    """What on-demand paging costs on mlx5_0 (docs/mlx5.md §10.6):
    ib_write_bw of 1 MiB messages over pinned memory, then over on-demand
    regions (--odp); mlx5_ib maps the pages a process has at registration,
    so only those it had not yet fault. Every fault raised is resumed."""
    c = odp_costs.measure(ctx, "mlx5_0", 18872, "vm3", "vm2")
    print(odp_costs.shown(c, "mlx5_0"))
    assert c.resumed == c.faults, c


def test_devx_event_and_command_channels(ctx):
    """DEVX's event and command channels (docs/mlx5.md §16.4), which no
    pyverbs test drives: a process makes a PD, a CQ and an RC QP by DEVX
    commands alone, in one UMEM; two event channels, one with the event's
    data and one without, deliver the CQ's completion event of a NOP
    (the EQE naming the CQ), and QUERY_CQ and QUERY_QP through an
    asynchronous command channel answer what the CQ and QP are
    (devx_channels.py)."""
    script = (Path(__file__).parent / "devx_channels.py").read_bytes()
    out = ctx.run("vm2", ["python3", "-"], stdin=script, timeout=120).out
    print(out)
    for line in (r"event channel: completion event of CQ \d+ with its EQE",
                 r"event channel without data: the cookie alone",
                 r"CQ \d+: the NOP's completion, QP \d+, WQE 0",
                 r"command channel: QUERY_CQ \(2\^3 CQEs on EQ \d+\) and QUERY_QP \(RTS, PD \d+\) "
                 r"answered", r"^PASS$"):
        assert re.search(line, out, re.M), f"no line like {line!r} in:\n{out}"
