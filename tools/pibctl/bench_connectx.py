"""./pib bench's ConnectX part: a fabric of a pib-hca guest (vm1) and two
ConnectX guests (vm2, vm3). perftest from a ConnectX to the pib-hca and to
the other ConnectX, beside pib-hca to pib-hca from the first part; UCX's
tag latency and bandwidth over rc_mlx5, ud_mlx5 and dc_mlx5 between the ConnectX
guests, beside rc_verbs between the pib-hca guests."""

from pibctl import fabric, hpc, ui
from pibctl.bench import HPC_ITERATIONS, PERFTEST, measure
from pibctl.pairs import GuestShell

# (column, server, client): who serves whom, as perftest runs.
PAIRS = (("mlx5 -> pib", "vm1", "vm2"), ("mlx5 -> mlx5", "vm3", "vm2"))
UCX = (("tag_lat", 8, "lat"), ("tag_bw", 1 << 20, "bw"))
UCX_TRANSPORTS = (("rc_mlx5", "rc_mlx5,ud_mlx5:aux"), ("ud_mlx5", "ud_mlx5"),
                  ("dc_mlx5", "dc_mlx5"))


def _perftest(ctx):
    """{(prog, size): [cell per PAIRS]}, a cell as bench.measure gives it."""
    rows = {}
    for prog, size, kind in PERFTEST:
        rows[(prog, size)] = [measure(ctx, prog, size, kind, None, [], server, client)
                              for _, server, client in PAIRS]
        ui.detail(f"{prog} {size} B done")
    return rows


def _ucx(ctx):
    """{(test, size): [MB/s or us per UCX_TRANSPORTS]}; None where it failed."""
    found = {}
    for test, size, kind in UCX:
        for name, tls in UCX_TRANSPORTS:
            try:
                lat, bw = hpc.ucx_perftest(ctx, tls, test, size, HPC_ITERATIONS[kind],
                                           device="mlx5_0:1", server_vm="vm3", client_vm="vm2")
                value = lat if kind == "lat" else bw
            except AssertionError as e:
                ui.warn(f"ucx_perftest {test} over {name} failed:\n{str(e)[-2000:]}")
                value = None
            found.setdefault((test, size), []).append(value)
    return found


def run(accel: str, pib_results) -> None:
    """Boots the ConnectX fabric, measures, prints beside `pib_results`
    (bench.run's rows: prog or UCX test, size, kind, (value, rate) or None,
    ...) and takes the fabric down."""
    ctx = GuestShell()
    ui.step("The ConnectX personality: vm1 a pib-hca, vm2 and vm3 ConnectX")
    fabric.up(vms=3, accel=accel, mlx5=("vm2", "vm3"))
    try:
        perftest = _perftest(ctx)
        ucx = _ucx(ctx)
    finally:
        fabric.down(quiet=True)
    pib = {(what, size): r for what, size, _, r, _ in pib_results}
    _print(perftest, ucx, pib, accel)


def _cell(value):
    return f"{value:14.2f}" if value is not None else f"{'failed':>14}"


def _print(perftest, ucx, pib, accel) -> None:
    print(f"\nperftest under {accel.upper()}, client -> server; bandwidth in MiB/s, latency "
          "in us (typical)\n")
    print(f"{'test':<14} {'bytes':>7} {'pib -> pib':>14} " +
          " ".join(f"{name:>14}" for name, _, _ in PAIRS))
    for (prog, size), cells in perftest.items():
        own = pib.get((prog, size))
        values = [own[0] if own else None] + [c[0] if c else None for c in cells]
        print(f"{prog:<14} {size:>7} " + " ".join(_cell(v) for v in values))
    print("\nUCX between two guests: MB/s, and latency in us (average)\n")
    print(f"{'test':<14} {'bytes':>7} {'rc_verbs pib':>14} " +
          " ".join(f"{name + ' mlx5':>14}" for name, _ in UCX_TRANSPORTS))
    for (test, size), values in ucx.items():
        own = pib.get((f"ucx {test}", size))
        print(f"{'ucx ' + test:<14} {size:>7} {_cell(own[0] if own else None)} " +
              " ".join(_cell(v) for v in values))
