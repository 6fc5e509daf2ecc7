"""What on-demand paging costs between two guests (docs/prm.md §6.9,
docs/mlx5.md §10.6): ib_write_bw's bandwidth over pinned memory and over
an on-demand region (--odp), the page faults the devices took meanwhile
and how long each took from the device's event to the driver's resume
(the device's clock), read from the devices' traces (pib_hca_page_fault,
_resumed) in each QEMU's log."""

import re
import statistics
from dataclasses import dataclass

from pibctl import qmp
from pibctl.pairs import perftest, perftest_figure, run_pair

EVENTS = ("pib_hca_page_fault", "pib_hca_page_fault_resumed")
_RAISED = re.compile(r"^pib_hca_page_fault .*: page fault 0x[0-9a-f]+ to the driver$", re.M)
_RESUMED = re.compile(r"^pib_hca_page_fault_resumed .* \(failed 0\) (\d+) ns after it was raised$",
                      re.M)


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
    """(faults raised, [ns from each fault to its resume, when it was
    mapped]) in `trace`."""
    return len(_RAISED.findall(trace)), [int(ns) for ns in _RESUMED.findall(trace)]


def _write_bw(ctx, device, port, odp, server_vm, client_vm):
    argv = perftest("ib_write_bw", "-d", device, "-s", "1048576", "-n", "200", "-p", str(port),
                    *(["--odp"] if odp else []))
    result, server, rc = run_pair(ctx, argv, argv, port=port, server_vm=server_vm,
                                  client_vm=client_vm)
    assert result.exitcode == 0 and rc == "0", (result.out, result.err, server)
    return perftest_figure(result, "bw")


def traced_faults(ctx, vms, run):
    """Runs `run()` with the page fault events traced in the QEMUs of
    `vms`; returns (what it returned, faults raised, [ns from each fault
    to its resume])."""
    logs = {vm: ctx.fabric.vm(vm).qemu_log for vm in vms}
    start = {vm: log.stat().st_size for vm, log in logs.items()}
    _trace(ctx, logs, True)
    try:
        result = run()
    finally:
        _trace(ctx, logs, False)
    faults, took = 0, []
    for vm, log in logs.items():
        with log.open("rb") as f:
            f.seek(start[vm])
            raised, times = fault_times(f.read().decode(errors="replace"))
        faults += raised
        took += times
    return result, faults, took


def median_us(took) -> float:
    return statistics.median(took) / 1000 if took else 0.0


def measure(ctx, device, port, server_vm, client_vm) -> Costs:
    """ib_write_bw of 1 MiB messages from client_vm to server_vm on
    `device`, pinned then on demand, with both devices' faults traced."""
    pinned = _write_bw(ctx, device, port, False, server_vm, client_vm)
    odp, faults, took = traced_faults(
        ctx, (server_vm, client_vm),
        lambda: _write_bw(ctx, device, port + 1, True, server_vm, client_vm))
    return Costs(pinned or 0.0, odp or 0.0, faults, len(took), median_us(took))


def shown(c: Costs, device: str) -> str:
    return (f"ib_write_bw 1 MiB on {device}: pinned {c.pinned_mib_s:.1f} MiB/s, on demand "
            f"{c.odp_mib_s:.1f} MiB/s; {c.faults} page faults, {c.resumed} resumed, "
            f"median {c.median_fault_us:.0f} us from the device's event to the driver's resume")
