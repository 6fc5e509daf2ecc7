"""The QEMU build and the device's properties, checked on the host."""

import os
import subprocess

from pibctl import paths


def _qemu(*args, timeout=60):
    return subprocess.run([str(paths.qemu_binary()), *args], capture_output=True, text=True,
                          timeout=timeout)


def test_device_help_lists_properties(ctx):
    out = _qemu("-device", "pib-hca,help").stdout
    for prop in ("node-guid", "doorbell-pages", "msix-vectors", "ports"):
        assert prop in out, out


def test_invalid_properties_are_refused_at_realize(ctx):
    base = [*paths.QEMU_FIRMWARE_ARGS, "-machine", "q35", "-accel", "tcg", "-nodefaults",
            "-display", "none", "-S"]
    for bad, why in [
        ("doorbell-pages=0", "doorbell page count out of range"),
        ("msix-vectors=100000", "MSI-X vector count out of range"),
        ("ports=3", "port count out of range"),
    ]:
        proc = _qemu(*base, "-device", f"pib-hca,{bad}")
        assert proc.returncode != 0, bad
        assert why in proc.stderr, proc.stderr


def test_pib_test_help_names_every_pass(ctx):
    """--pass's help is typed in cli.py (importing the passes would slow
    every ./pib command); it must name each one e2e_pass.PASSES holds."""
    from pibctl import e2e_pass
    # Wide enough that argparse breaks no line, which it does at hyphens.
    out = subprocess.run([str(paths.REPO / "pib"), "test", "--help"], capture_output=True,
                         text=True, timeout=60, check=True,
                         env={**os.environ, "COLUMNS": "1000"}).stdout
    passes = next(line for line in out.splitlines() if "only these end-to-end passes" in line)
    for name in e2e_pass.PASSES:
        assert f" {name}," in passes or f" {name} (" in passes, f"--pass's help lacks {name}:\n{out}"


def test_the_phase_table_says_what_the_cpus_did(ctx, monkeypatch):
    """Each phase's line of ./pib test's table says how many of the
    machine's CPUs were busy at normal priority (the fabric, the tests)
    and at low priority (the host lane, niced): /proc/stat's counts."""
    from pibctl import ui
    cpus = os.cpu_count()
    assert ui.cores_used((0, 0, 0), (300, 100, 1000)) == (round(cpus * 0.3, 2),
                                                         round(cpus * 0.1, 2))
    assert ui.cores_used((5, 5, 10), (5, 5, 10)) == (0.0, 0.0)
    first = ui.cpu_jiffies()
    sum(range(2_000_000))  # some CPU time of this process's
    second = ui.cpu_jiffies()
    assert first[2] > 0 and all(b >= a for a, b in zip(first, second)), (first, second)
    busy, low = ui.cores_used(first, second)
    assert 0 <= busy + low <= cpus + 0.01, (busy, low)
    # A child lane reports its phases with their CPUs (test_lanes.write_results);
    # a table of this test's own, not the run's.
    monkeypatch.setattr(ui, "_starts", [])
    ui.phase("a phase")
    sum(range(2_000_000))
    [(name, seconds, steps, (busy, low))] = ui.phase_durations()
    assert name == "a phase" and seconds > 0 and not steps and busy > 0, (seconds, busy)
