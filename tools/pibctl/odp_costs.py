"""What on-demand paging costs between two guests (docs/prm.md §6.9,
docs/mlx5.md §10.6): ib_write_bw's bandwidth over pinned memory and over
an on-demand region (--odp), the page faults the devices took meanwhile
and how long each took from the device's event to the driver's resume,
read from the devices' traces (pib_hca_page_fault, _resumed) in each
QEMU's log."""

import re
import statistics
from dataclasses import dataclass

from pibctl import qmp
from pibctl.pairs import perftest, perftest_figure, run_pair

EVENTS = ("pib_hca_page_fault", "pib_hca_page_fault_resumed")
# QEMU's log trace backend: "PID@SECONDS.MICROSECONDS:event message".
_LINE = re.compile(r"^\d+@(\d+\.\d+):(pib_hca_page_fault(?:_resumed)?) (.*)$", re.M)
_TOKEN = re.compile(r"page fault (0x[0-9a-f]+)")


@dataclass
class Costs:
    pinned_mib_s: float
    odp_mib_s: float
    faults: int
    resumed: int
    median_fault_us: float


def _trace(ctx, vms, on):
    for vm in vms:
        for name in EVENTS:
            qmp.command(ctx.fabric.vm(vm).path / "qmp.sock", "trace-event-set-state", name=name,
                        enable=on)


def fault_times(trace: str):
    """(faults raised, [seconds from each fault to its resume]) in `trace`."""
    raised, took = {}, []
    for m in _LINE.finditer(trace):
        token = _TOKEN.search(m.group(3))
        if not token:
            continue
        if m.group(2) == "pib_hca_page_fault":
            raised[token.group(1)] = float(m.group(1))
        elif token.group(1) in raised:
            took.append(float(m.group(1)) - raised.pop(token.group(1)))
    return len(raised) + len(took), took


def _write_bw(ctx, device, port, odp, server_vm, client_vm):
    argv = perftest("ib_write_bw", "-d", device, "-s", "1048576", "-n", "200", "-p", str(port),
                    *(["--odp"] if odp else []))
    result, server, rc = run_pair(ctx, argv, argv, port=port, server_vm=server_vm,
                                  client_vm=client_vm)
    assert result.exitcode == 0 and rc == "0", (result.out, result.err, server)
    return perftest_figure(result, "bw")


def measure(ctx, device, port, server_vm, client_vm) -> Costs:
    """ib_write_bw of 1 MiB messages from client_vm to server_vm on
    `device`, pinned then on demand, with both devices' faults traced."""
    pinned = _write_bw(ctx, device, port, False, server_vm, client_vm)
    logs = {vm: ctx.fabric.vm(vm).qemu_log for vm in (server_vm, client_vm)}
    start = {vm: log.stat().st_size for vm, log in logs.items()}
    _trace(ctx, logs, True)
    try:
        odp = _write_bw(ctx, device, port + 1, True, server_vm, client_vm)
    finally:
        _trace(ctx, logs, False)
    faults, took = 0, []
    for vm, log in logs.items():
        with log.open("rb") as f:
            f.seek(start[vm])
            raised, times = fault_times(f.read().decode(errors="replace"))
        faults += raised
        took += times
    median = statistics.median(took) * 1e6 if took else 0.0
    return Costs(pinned or 0.0, odp or 0.0, faults, len(took), median)


def shown(c: Costs, device: str) -> str:
    return (f"ib_write_bw 1 MiB on {device}: pinned {c.pinned_mib_s:.1f} MiB/s, on demand "
            f"{c.odp_mib_s:.1f} MiB/s; {c.faults} page faults, {c.resumed} resumed, "
            f"median {c.median_fault_us:.0f} us from the device's event to the driver's resume")
