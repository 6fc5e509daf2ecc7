"""./pib bench: how fast the data path is.

1. The native benchmark of the device core (tests/bench/core-bench): two
   device instances in one process, no QEMU, beside memcpy. Then the
   fabric benchmark (fabric_bench.py): the two devices in two processes
   through one switch process, then two, with the share of the first.
2. The perftest set between two guests over pib-hca, and the same set over
   Soft-RoCE (rdma_rxe on the guests' management network) on the same
   guests, with the pib/rxe ratio of each row.
3. What HPC codes get on the same guests over pib-hca: UCX's tag latency
   and bandwidth (ucx_perftest over rc_verbs) and an MPI ping-pong (Open
   MPI over UCX), latency at 8 B and bandwidth at 1 MiB.
4. ib_write_bw and ib_write_lat again on guests whose HCAs keep their
   packets on the stream (rings=off), for the ratio of ring cables.
5. The ConnectX personality (bench_connectx.py), on a fabric of its own:
   perftest from a ConnectX to a pib-hca and to another ConnectX, and
   UCX's rc_mlx5 and ud_mlx5 beside rc_verbs on pib-hca.
6. One table of the figures with goals (bench_summary.py), with the git
   revision."""

import subprocess

from pibctl import bench_summary, core_build, fabric, fabric_bench, hpc, paths, setup, ui

from pibctl.pairs import PERFTEST_UNCALIBRATED, GuestShell, perftest, perftest_last_row, run_pair

# (program, message size, what to report)
PERFTEST = [
    ("ib_write_bw", 65536, "bw"),
    ("ib_write_bw", 4096, "bw"),
    ("ib_send_bw", 65536, "bw"),
    ("ib_read_bw", 65536, "bw"),
    ("ib_atomic_bw", 8, "bw"),
    ("ib_write_lat", 8, "lat"),
    ("ib_send_lat", 8, "lat"),
    ("ib_read_lat", 8, "lat"),
    ("ib_atomic_lat", 8, "lat"),
]
ITERATIONS = {"bw": 200, "lat": 200}
PORT = 18540
# (what, message size, bandwidth or latency); measured by _measure_hpc.
HPC = [
    ("ucx tag_lat", 8, "lat"),
    ("ucx tag_bw", 1 << 20, "bw"),
    ("MPI ping-pong", 8, "lat"),
    ("MPI ping-pong", 1 << 20, "bw"),
]
HPC_ITERATIONS = {"lat": 500, "bw": 50}


def native() -> str:
    """Prints core-bench's table, and returns it."""
    ui.step("Native benchmark of the device core (no QEMU)")
    binary = paths.core_build_dir() / "tests" / "bench" / "core-bench"
    table = subprocess.run([str(binary)], check=True, capture_output=True, text=True).stdout
    print(table, flush=True)
    return table


def fabric_benchmarks(core_table: str) -> dict:
    """The devices in two processes through one switch process on streams
    and on ring cables, then two switch processes: the ceiling of the path
    between guests, with no guest. Returns each layout's table."""
    core = fabric_bench.in_process(core_table)
    tables = {}
    for switches, cable in fabric_bench.LAYOUTS:
        ui.step(f"Fabric benchmark through {fabric_bench.describe(switches, cable)} (no guest)")
        tables[(switches, cable)] = fabric_bench.run(switches, cable)
        print(fabric_bench.with_share(tables[(switches, cable)], core), flush=True)
    ui.step(f"Fabric benchmark: {', '.join(map(str, fabric_bench.PAIRS))} pairs through one "
            "switch process, and through a switch process each (no guest)")
    print(fabric_bench.pairs_table(), flush=True)
    return tables


# The summary's guest rows: longer runs than the perftest table's, so
# that the start of a run (the slowest part under TCG) weighs less.
SUMMARY_ITERATIONS = {"bw": 2000, "lat": 1000}


def _guest_cable_figures(ctx) -> dict:
    """ib_write_bw at 64 KiB and ib_write_lat at 8 B on the fabric up now."""
    figures = {}
    for prog, size, kind in (("ib_write_bw", 65536, "bw"), ("ib_write_lat", 8, "lat")):
        row = measure(ctx, prog, size, kind, "pib_0", [], iterations=SUMMARY_ITERATIONS[kind])
        figures[kind] = row[0] if row else None
    return figures


def _on_stream_cables(ctx, accel) -> dict:
    """The same two figures between two guests whose HCAs keep their
    packets on the socket's stream: the ratio of ring cables to it."""
    ui.step("ib_write_bw and ib_write_lat again, on stream cables (rings=off)")
    fabric.up(vms=2, accel=accel, cable="stream")
    try:
        return _guest_cable_figures(ctx)
    finally:
        fabric.down(quiet=True)


def _summary(core_table: str, fabric_tables: dict, guests: dict, accel: str, note="") -> None:
    core = bench_summary.core_figures(core_table)
    rows = (bench_summary.native_rows(core) + bench_summary.fabric_rows(fabric_tables, core) +
            bench_summary.guest_rows(guests, accel))
    print("\n" + bench_summary.render(rows, note), flush=True)


def measure(ctx, prog, size, kind, device, extra, server_vm="vm2", client_vm="vm1",
            iterations=None):
    """One perftest row, client_vm to server_vm, on `device` (None: each
    guest's only HCA): (MiB/s, messages/s) or (us, None); None if it failed."""
    argv = perftest(prog, *(["-d", device] if device else []),
                    "-n", str(iterations or ITERATIONS[kind]), "-p", str(PORT), *extra)
    if not prog.startswith("ib_atomic"):
        argv += ["-s", str(size)]
    client, server_out, rc = run_pair(ctx, argv, argv, port=PORT, timeout=180,
                                      server_vm=server_vm, client_vm=client_vm)
    if client.exitcode != 0 or rc != "0":
        ui.warn(f"{' '.join(argv)} failed: client {client.exitcode}, server {rc}\n"
                f"{client.out[-1500:]}{client.err[-1500:]}\n{server_out[-1500:]}")
        return None
    row = perftest_last_row(client.out)
    if not row:
        return None
    if PERFTEST_UNCALIBRATED in client.err:
        ui.warn(f"{' '.join(argv)}: perftest could not learn its clock's rate, "
                f"no figures: {client.err.strip()[-300:]}")
        return None
    if kind == "bw":  # bytes, iterations, peak MiB/s, average MiB/s, Mpps
        return float(row[3]), float(row[4]) * 1e6
    return float(row[4]), None  # typical latency, us


def _measure_hpc(ctx, device):
    """HPC's rows on `device`: {(what, size): (value, None)}, MB/s for
    bandwidth, us for latency; a failure is reported and left out."""
    found = {}
    tls = "rc_verbs,ud_verbs:aux"
    for what, size, kind in HPC:
        try:
            if what.startswith("ucx"):
                lat, bw = hpc.ucx_perftest(ctx, tls, what.split()[1], size, HPC_ITERATIONS[kind],
                                           device=f"{device}:1")
                found[(what, size)] = (lat if kind == "lat" else bw, None)
            elif (what, size) not in found:
                pingpong = hpc.mpi_pingpong(ctx, HPC_ITERATIONS["lat"],
                                            [f"UCX_TLS={tls}", f"UCX_NET_DEVICES={device}:1"])
                found[(what, 8)] = (pingpong[8][0], None)
                found[(what, 1 << 20)] = (pingpong[1 << 20][1], None)
        except AssertionError as e:
            ui.warn(f"{what} {size} B on {device} failed:\n{str(e)[-2000:]}")
    return found


def _rxe_up(ctx) -> str:
    """Soft-RoCE on each guest's management NIC; returns its GID index."""
    for vm in ("vm1", "vm2"):
        ctx.sh(vm, "modprobe rdma_rxe; dev=$(ls /sys/class/net | grep -v '^lo$' | grep -v '^ib' | head -1); "
                   "[ -e /sys/class/infiniband/rxe0 ] || rdma link add rxe0 type rxe netdev $dev")
    # The IPv4-mapped GID (RoCE v2) of vm1's address.
    out = ctx.sh("vm1", "for f in /sys/class/infiniband/rxe0/ports/1/gids/*; do "
                        "echo ${f##*/} $(cat $f); done", check=False).out
    for line in out.splitlines():
        index, gid = line.split()
        if gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return index
    return "1"


def run(vms: int = 2, accel: str = "tcg", native_only: bool = False,
        fabric_only: bool = False) -> int:
    setup.run()
    core_build.build_benches()
    core = native()
    if native_only:
        _summary(core, {}, {}, accel)
        return 0
    tables = fabric_benchmarks(core)
    if fabric_only:
        _summary(core, tables, {}, accel, "guests: not measured (--fabric)")
        return 0
    ctx = GuestShell()
    fab = fabric.load()
    started = fab is None
    if started:
        fabric.up(vms=2, accel=accel)
    try:
        ui.step("perftest between vm1 and vm2: pib-hca, then Soft-RoCE on the same guests")
        gid = _rxe_up(ctx)
        results = []
        for prog, size, kind in PERFTEST:
            pib = measure(ctx, prog, size, kind, "pib_0", [])
            rxe = measure(ctx, prog, size, kind, "rxe0", ["-x", gid])
            results.append((prog, size, kind, pib, rxe))
            ui.detail(f"{prog} {size} B done")
        # UCX 1.18 lists no transport on Soft-RoCE's rxe0 (ucx_info -d), so
        # these rows have no rxe figure.
        ui.step("UCX and MPI between vm1 and vm2 over pib-hca")
        pib = _measure_hpc(ctx, "pib_0")
        for what, size, kind in HPC:
            results.append((what, size, kind, pib.get((what, size)), None))
        _print_table(results, accel)
        print("UCX and MPI on rxe: not measured, UCX offers no transport on rxe0")
        ui.step("ib_write_bw and ib_write_lat for the summary, longer runs")
        guests = {fab.cable if fab else "ring": _guest_cable_figures(ctx)}
    finally:
        if started:
            fabric.down(quiet=True)
    if not started:
        print("\nThe ConnectX part and the stream cables boot fabrics of their own: "
              "not run beside a fabric that is up.")
        _summary(core, tables, guests, accel)
        return 0
    guests["stream"] = _on_stream_cables(ctx, accel)
    from pibctl import bench_connectx  # it builds on this module

    bench_connectx.run(accel, results)
    _summary(core, tables, guests, accel)
    return 0


def _print_table(results, accel) -> None:
    print(f"\nperftest, 2 guests under {accel.upper()}; bandwidth in MiB/s, latency in us "
          f"(typical); UCX and MPI rows: MB/s, and latency in us (average; MPI: one way)\n")
    print(f"{'test':<14} {'bytes':>7} {'pib-hca':>10} {'msg/s':>9} {'rxe':>10} {'msg/s':>9} "
          f"{'pib/rxe':>8}")
    for prog, size, kind, pib, rxe in results:
        def cell(r):
            return f"{r[0]:10.2f}" if r else f"{'failed':>10}"

        def rate(r):
            return f"{r[1]:9.0f}" if r and r[1] is not None else f"{'':>9}"

        if pib and rxe and pib[0] and rxe[0]:
            # Bandwidth: higher is better; latency: lower is better.
            ratio = pib[0] / rxe[0] if kind == "bw" else rxe[0] / pib[0]
            ratio_text = f"{ratio:7.2f}x"
        else:
            ratio_text = f"{'-':>8}"
        print(f"{prog:<14} {size:>7} {cell(pib)} {rate(pib)} {cell(rxe)} {rate(rxe)} {ratio_text}")
    print("\npib/rxe: how many times better pib-hca is (bandwidth ratio; for latency, "
          "rxe's latency over pib-hca's)")
