"""./pib fabric migrate VM: live-migrates a guest to a new QEMU process on
this host (docs/migration.md). The new QEMU runs the guest's command line
with -incoming and sockets of its own while the old one still serves
them; QEMU's precopy migration moves RAM and the devices' state, the
pib-hca among them, whose switch port keeps the link up across the move
(docs/wire.md, "A device that moves"). Once the old QEMU has handed over,
it is stopped and the new one's sockets take the usual names."""

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pibctl import crash_report, fabric, paths, qmp, share, ui

# The sockets a VM's QEMU listens on, which the old QEMU holds during the
# move: the new one listens beside them and takes their names after. The
# names it listens on first are its own (they name the old QEMU's pid): a
# QEMU unlinks the paths it made as it exits, and the old one must not
# take the new one's.
SOCKETS = ("console.sock", "qga.sock", "qmp.sock")
# Precopy over a UNIX socket on one host: as fast as it goes, and a
# downtime the last round may take (QEMU's default is 300 ms).
MAX_BANDWIDTH = 8 << 30  # bytes/s
DOWNTIME_LIMIT_MS = 300
MIGRATION_TIMEOUT_S = 300


def state_version() -> int:
    """The format version of the pib-hca state this checkout's device
    saves and reads: kStateVersion in device_state.cc."""
    source = (paths.REPO / "qemu-hw" / "core" / "src" / "device_state.cc").read_text()
    return int(re.search(r"constexpr uint32_t kStateVersion = (\d+);", source).group(1))


@dataclass
class Moved:
    pid: int
    total_ms: int
    downtime_ms: int
    setup_ms: int
    ram_mb: float


def _incoming_command(vm: fabric.Vm, suffix: str, channel: Path) -> list:
    """The VM's command, listening on sockets beside the old QEMU's (their
    names + `suffix`) and appending to its console log, waiting for the
    state on `channel`."""
    cmd = []
    for arg in vm.command:
        for name in SOCKETS:
            arg = arg.replace(str(vm.path / name), str(vm.path / (name + suffix)))
        cmd.append(arg.replace("logappend=off", "logappend=on"))
    return cmd + ["-incoming", f"unix:{channel}"]


def _wait_status(sock: Path, wanted: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if qmp.command(sock, "query-status")["status"] == wanted:
                return
        except qmp.QmpError:
            pass
        if time.monotonic() > deadline:
            raise ui.StepFailed(f"the new QEMU did not become {wanted} in {timeout:.0f} s")
        time.sleep(0.1)


def wait_migrated(sock: Path) -> dict:
    """query-migrate's answer once the migration ended."""
    deadline = time.monotonic() + MIGRATION_TIMEOUT_S
    while True:
        info = qmp.command(sock, "query-migrate")
        if info.get("status") in ("completed", "failed", "cancelled"):
            return info
        if time.monotonic() > deadline:
            qmp.command(sock, "migrate_cancel")
            raise ui.StepFailed(f"the migration did not end in {MIGRATION_TIMEOUT_S} s")
        time.sleep(0.05)


def _stop(pid: int, run_dir: str, what: str) -> None:
    fabric._kill(pid, run_dir, what)  # pylint: disable=protected-access
    fabric._reap(pid)  # pylint: disable=protected-access


def _why(info: dict, stderr: Path, said_before: int) -> str:
    """Why a migration failed: the old QEMU's reason, and the first thing
    the new one said (which names what it could not take)."""
    why = info.get("error-desc", info.get("status", "?"))
    said = fabric.said_since(stderr, said_before)
    return f"{why} (the new QEMU: {said[0]})" if said else why


def _run_on(source: Path) -> None:
    """The old QEMU runs the guest again if the migration left it stopped."""
    try:
        if qmp.command(source, "query-status")["status"] in ("postmigrate", "paused"):
            qmp.command(source, "cont")
    except qmp.QmpError:
        pass


def migrate(fab: fabric.Fabric, name: str, edit=None) -> Moved:
    """Moves guest `name` to a new QEMU; updates `fab` (and its saved state)
    with the new process. A failed migration leaves the guest running in
    its old QEMU, and says why. `edit`, when given, changes the new QEMU's
    command line (a test's: one that cannot take the guest)."""
    vm = fab.vm(name)
    if not fabric.ours(vm.pid, fab.run_dir):
        raise ui.StepFailed(f"{name} is not running")
    share.refuse_while_shared(fab, f"fabric migrate {name}")
    channel = vm.path / "migration.sock"
    channel.unlink(missing_ok=True)
    suffix = f".from-{vm.pid}"
    for sock in SOCKETS:
        (vm.path / (sock + suffix)).unlink(missing_ok=True)
    crash_report.allow_core_dumps()
    stderr = vm.path / "qemu.stderr"
    said_before = fabric.size_of(stderr)
    old_log = vm.set_aside_qemu_log(vm.pid)
    with open(stderr, "a") as err:
        command = _incoming_command(vm, suffix, channel)
        proc = subprocess.Popen(edit(command) if edit else command, stdin=subprocess.DEVNULL,
                                stdout=err, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=vm.path)
    incoming_qmp = vm.path / ("qmp.sock" + suffix)
    source = vm.path / "qmp.sock"
    try:
        _wait_status(incoming_qmp, "inmigrate", 60)
        # The return path: the old QEMU hears whether the new one took the
        # state, and runs on if it did not (without it, precopy counts as
        # done once everything is sent).
        qmp.command(source, "migrate-set-capabilities",
                    capabilities=[{"capability": "return-path", "state": True}])
        qmp.command(source, "migrate-set-parameters",
                    **{"max-bandwidth": MAX_BANDWIDTH, "downtime-limit": DOWNTIME_LIMIT_MS})
        qmp.command(source, "migrate", uri=f"unix:{channel}")
        info = wait_migrated(source)
        if info["status"] != "completed":
            raise ui.StepFailed(f"the migration of {name} failed: "
                                f"{_why(info, stderr, said_before)}; "
                                f"{name} runs on in its old QEMU")
        _wait_status(incoming_qmp, "running", 60)
    except BaseException as e:
        proc.kill()
        proc.wait()
        if old_log.exists():  # the old QEMU's log is qemu.log again
            os.replace(old_log, vm.qemu_log)
        _run_on(source)
        if isinstance(e, qmp.QmpError):
            raise ui.StepFailed(f"the migration of {name} failed: {e}; {name} runs on in its "
                                "old QEMU") from e
        raise
    # The old QEMU unlinks the paths it listened on as it exits: the new
    # one's sockets take the usual names only after it is gone.
    _stop(vm.pid, fab.run_dir, f"the old QEMU of {name}")
    for sock in SOCKETS:
        os.replace(vm.path / (sock + suffix), vm.path / sock)
    channel.unlink(missing_ok=True)
    vm.pid = proc.pid
    fab.save()
    ram = info.get("ram", {})
    return Moved(pid=proc.pid, total_ms=int(info.get("total-time", 0)),
                 downtime_ms=int(info.get("downtime", 0)), setup_ms=int(info.get("setup-time", 0)),
                 ram_mb=ram.get("transferred", 0) / 1e6)
