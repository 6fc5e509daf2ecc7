"""./pib fabric snapshot save|load NAME: a whole fabric, every guest and
every switch, saved at one moment and brought back (docs/migration.md,
"Snapshots of a fabric").

Saving stops every guest first, so that nothing moves while the parts are
taken: each switch writes its state (its control socket's `save`), then
each QEMU migrates its guest, RAM and devices with the pib-hca among
them, into a file of the snapshot. The guests then run on. Loading starts
the switches from their states (each link that was up waits for its peer
to resume it) and a QEMU per guest with `-incoming` from its file: the
devices resume their links, and every port is ACTIVE as it was, without
the subnet manager doing anything.

A restored guest is a copy, and what must be unique is made anew: QEMU's
VM generation ID changes, so that its kernel reseeds its random numbers;
the fabric's ssh keys are made for the new fabric and given to the
guests; their clocks are set to the host's."""

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pibctl import fabric, guest_ssh, migrate, paths, qga, qmp, share, ui

# Bump when what a snapshot holds, or how it is loaded, changes.
SNAPSHOT_VERSION = 1
META = "snapshot.json"
LOAD_TIMEOUT_S = 120

# Run in each restored guest: the new fabric's ssh keys (the fw_cfg file
# is the new QEMU's, read anew) replace the snapshot's, and sshd reloads
# them.
REKEY = ("keys=/sys/firmware/qemu_fw_cfg/by_name/opt/pib/ssh/raw; "
         "[ -r $keys ] || exit 0; tar -x -C / -f $keys || exit 1; "
         "[ -r /run/sshd.pid ] && kill -HUP $(cat /run/sshd.pid); exit 0")


@dataclass
class Taken:
    path: Path
    paused_ms: int  # how long the guests were stopped
    total_s: float
    mb: float  # the snapshot's size on disk


@dataclass
class Restored:
    total_s: float
    loaded_s: float  # until every QEMU ran its guest again
    active_s: float  # until every port was ACTIVE


def snapshots_dir() -> Path:
    return paths.cache_dir() / "snapshots"


def path_of(name: str) -> Path:
    if not name or "/" in name or name.startswith(".") or name == "fabric-up":
        raise ui.StepFailed(f"{name!r} is not a snapshot name (a word, no '/')")
    return snapshots_dir() / name


def _size_mb(path: Path) -> float:
    return sum(f.stat().st_blocks * 512 for f in path.iterdir() if f.is_file()) / 1e6


def _saved(vm: fabric.Vm, said_before: int) -> None:
    """Waits until vm's QEMU has saved it; a device that cannot be saved
    says why on QEMU's stderr (QEMU's own error names only the device)."""
    info = migrate.wait_migrated(vm.path / "qmp.sock")
    if info["status"] != "completed":
        said = [line.split("pib-hca: ", 1)[1]
                for line in fabric.said_since(vm.path / "qemu.stderr", said_before)
                if "pib-hca: " in line]
        raise ui.StepFailed(f"{vm.name} could not be saved: "
                            f"{info.get('error-desc', info['status'])}"
                            + (f" ({said[0]})" if said else ""))


def save(fab: fabric.Fabric, dest: Path, run_on: bool = True) -> Taken:
    """Saves the running fabric `fab` to the directory `dest` (replaced
    whole once the snapshot is complete). The guests run on after, unless
    `run_on` is False."""
    share.refuse_while_shared(fab, "fabric snapshot save")
    gone = fabric.stopped_processes(fab)
    if gone:
        raise ui.StepFailed(f"not running: {', '.join(gone)}; a snapshot needs the whole fabric")
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    start = time.monotonic()
    try:
        paused_ms = _take(fab, partial, run_on)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)  # no half snapshot is left
        raise
    meta = {"version": SNAPSHOT_VERSION, "made": time.strftime("%Y-%m-%d %H:%M:%S"),
            "qemu": str(paths.qemu_binary()), "cache": str(paths.cache_dir()),
            "fabric": asdict(fab)}
    (partial / META).write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(partial, dest)
    return Taken(path=dest, paused_ms=paused_ms, total_s=time.monotonic() - start,
                 mb=_size_mb(dest))


def _take(fab: fabric.Fabric, partial: Path, run_on: bool) -> int:
    """Stops the guests, saves every switch and guest into `partial`, and
    runs the guests on if `run_on`; returns how long they were stopped, in
    ms (0 when they stay stopped)."""
    stopped = []
    paused_at = time.monotonic()
    try:
        for vm in fab.vms:
            qmp.command(vm.path / "qmp.sock", "stop")
            stopped.append(vm)
        paused_at = time.monotonic()
        for switch in fab.topo.switches:
            fabric.switch_control(fab, switch.name, f"save {partial / (switch.name + '.state')}")
        said_before = {vm.name: fabric.size_of(vm.path / "qemu.stderr") for vm in fab.vms}
        for vm in fab.vms:
            sock = vm.path / "qmp.sock"
            # A file takes no return path (a move to a QEMU does, migrate.py).
            qmp.command(sock, "migrate-set-capabilities",
                        capabilities=[{"capability": "return-path", "state": False}])
            # QEMU's default limit (128 MiB/s) would make a guest's RAM take seconds.
            qmp.command(sock, "migrate-set-parameters",
                        **{"max-bandwidth": migrate.MAX_BANDWIDTH})
            qmp.command(sock, "migrate", uri=f"file:{partial / (vm.name + '.state')}")
        for vm in fab.vms:
            _saved(vm, said_before[vm.name])
    except qmp.QmpError as e:
        raise ui.StepFailed(f"the snapshot failed: {e}") from e
    finally:
        if run_on:
            for vm in stopped:
                try:
                    qmp.command(vm.path / "qmp.sock", "cont")
                except qmp.QmpError as e:
                    ui.warn(f"{vm.name} did not run on after the snapshot: {e}")
    return int((time.monotonic() - paused_at) * 1000) if run_on else 0


def read_meta(source: Path) -> dict:
    try:
        meta = json.loads((source / META).read_text())
    except (OSError, ValueError) as e:
        raise ui.StepFailed(f"{source} is not a snapshot: {e}") from None
    if meta.get("version") != SNAPSHOT_VERSION:
        raise ui.StepFailed(f"{source} is a snapshot of version {meta.get('version')}; this "
                            f"./pib loads version {SNAPSHOT_VERSION}")
    return meta


def _fabric_of(meta: dict, source: Path, run: Path) -> fabric.Fabric:
    """The snapshot's fabric as it runs in `run`: its QEMUs' command lines
    name the new run directory's sockets and logs, and the QEMU of this
    checkout's build (the one that saved it may be gone with its build
    tree; a device that cannot read the saved state refuses it, saying
    why)."""
    data = dict(meta["fabric"])
    # The run directory first: it may be inside the cache.
    moved = {data["run_dir"]: str(run), meta.get("cache", ""): str(paths.cache_dir())}
    vms = []
    for v in data.pop("vms"):
        vm = fabric.Vm(**v)
        vm.dir = str(run / vm.name)
        vm.pid = 0
        vm.command = [str(paths.qemu_binary())] + [_renamed(arg, moved) for arg in vm.command[1:]]
        vms.append(vm)
    data.update(run_dir=str(run), vms=vms, mgmt_switch_pid=0, ib_switch_pids={},
                booted_again=[], restored_from=str(source))
    return fabric.Fabric(**data)


def _renamed(arg: str, names: dict) -> str:
    """`arg` with each of `names`' paths replaced by its new name, in
    order (a path inside another comes first)."""
    for old, new in names.items():
        if old:
            arg = arg.replace(old, new)
    return arg


def _wait_running(fab: fabric.Fabric, deadline: float) -> None:
    """Until every QEMU loaded its guest, then runs them all at once; a
    QEMU that ended (a state it refused) fails with what it said. The
    guests were stopped when they were saved, and a QEMU leaves a guest as
    the stream says it was. None runs before every device took its state
    and resumed the link its switch kept: a guest run earlier would send
    to ports whose guests were still loading, and their switch ports
    would discard it (PortXmitDiscards)."""
    pending = list(fab.vms)
    while pending:
        for vm in list(pending):
            if not fabric.ours(vm.pid, fab.run_dir):
                raise ui.StepFailed(f"{vm.name} could not be restored: "
                                    + fabric.ended_report(vm))
            try:
                sock = vm.path / "qmp.sock"
                if qmp.command(sock, "query-migrate").get("status") == "completed":
                    pending.remove(vm)
            except qmp.QmpError:
                pass
        if pending and time.monotonic() > deadline:
            raise ui.StepFailed(f"{pending[0].name} was not restored in {LOAD_TIMEOUT_S} s\n"
                                + fabric.qemu_log_tail(pending[0]))
        time.sleep(0.05)
    while any("its device moves" in s for s in fabric.switch_port_states(fab).values()):
        if time.monotonic() > deadline:
            break  # the grace runs out in the switch; wait_active() says what
        time.sleep(0.05)
    for vm in fab.vms:
        if qmp.command(vm.path / "qmp.sock", "query-status")["status"] == "paused":
            qmp.command(vm.path / "qmp.sock", "cont")


def _make_unique(fab: fabric.Fabric) -> None:
    """What a copy must not share with its original: the ssh keys (made
    for this fabric), and the clock, set to the host's. The random seed
    is the kernel's to make anew, told by the VM generation ID."""
    for vm in fab.vms:
        # The agent's guest-set-time needs hwclock, which the image leaves out.
        now = f"@{time.time_ns() / 1e9:.6f}"
        result = qga.run(vm.qga_sock, ["sh", "-c", f"date -s {now} >/dev/null && {{ {REKEY}; }}"],
                         timeout=30)
        if result.exitcode != 0:
            raise ui.StepFailed(f"{vm.name}: its clock or new ssh keys were not set: "
                                f"{result.err}")


def load(source: Path, share_dir: str = "") -> tuple:
    """Brings up the fabric of the snapshot in `source` (no fabric may be
    up); returns it and how long each part took. Its QEMUs get
    `share_dir` as their share's backend (share.py), which the caller
    then attaches."""
    meta = read_meta(source)
    fabric.clear_stale()
    if fabric.load() is not None:
        raise fabric.AlreadyUp("a fabric is already up; ./pib fabric down first")
    run = paths.run_dir()
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    fab = _fabric_of(meta, source, run)
    fab.share = share_dir
    for vm in fab.vms:
        vm.path.mkdir()
    start = time.monotonic()
    try:
        guest_ssh.make(run, fab.vms, fabric._guest_names)  # pylint: disable=protected-access
        fabric.start_mgmt_switch(fab)
        fabric.start_ib_switches(fab, restore=source)
        for vm in fab.vms:
            (vm.path / "qemu.cmdline").write_text(" ".join(vm.command) + "\n")
            fabric.start_process(vm, [*share.qemu_backend_args(share_dir),
                                      "-incoming", f"file:{source / (vm.name + '.state')}"])
            fab.save()
        _wait_running(fab, time.monotonic() + LOAD_TIMEOUT_S)
        loaded = time.monotonic() - start
        _make_unique(fab)
        fabric.wait_active(fab, timeout=60)
    except BaseException:
        fabric.down(quiet=True)
        raise
    total = time.monotonic() - start
    return fab, Restored(total_s=total, loaded_s=loaded, active_s=total - loaded)


# A fabric `./pib fabric up` restores instead of booting it: one snapshot
# per fabric (its topology, guests' command lines, QEMU, kernel, image and
# switch), made after its first boot. The least recently used go when
# there are more.
CACHED_KEEP = 6


def cache_key(fab: fabric.Fabric) -> str:
    """What a fabric's snapshot depends on: its topology (which gives each
    switch's command line), every guest's command line (the run directory
    and the cache's place left out), and the contents of the QEMU, the
    switch, the kernel and the image."""
    # The QEMU is named by its content: each build of other sources (a
    # changed doc or test) has a copy of its own (source_tree.py). The
    # cache is named by its role: the same fabric in another cache (a
    # container's, with the host's snapshots mounted in) restores too.
    names = {fab.run_dir: "RUN", str(paths.qemu_binary()): "QEMU", str(paths.cache_dir()): "CACHE"}
    parts = [json.dumps(fab.topology, sort_keys=True), fab.accel, fab.cable,
             str(SNAPSHOT_VERSION)]
    for vm in fab.vms:
        parts.append(" ".join(_renamed(arg, names) for arg in vm.command))
    # A simulated fabric's file comes from its spec by pibctl's code: its
    # text, so that a state is restored only into the fabric that saved it.
    parts += [fabric.simulated_fabric_text(s) for s in fab.topo.switches if s.simulate]
    files = [paths.qemu_binary(), paths.fabric_switch_binary(),
             Path(fab.kernel or paths.kernel_image()), Path(fab.initrd or paths.initrd_image())]
    parts += [_content_hash(f) for f in files]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _content_hash(f: Path) -> str:
    """The hash of a file's content, remembered by its path, size and time:
    a build of other sources (a changed doc, a test) whose QEMU came out
    the same is the same build, and its snapshots hold."""
    memo_file = snapshots_dir() / "hashes.json"
    try:
        memo = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        memo = {}
    st = f.stat()
    identity = f"{f}:{st.st_size}:{st.st_mtime_ns}"
    if identity not in memo:
        h = hashlib.sha256()
        with open(f, "rb") as data:
            while chunk := data.read(1 << 20):
                h.update(chunk)
        memo = {k: v for k, v in memo.items() if Path(k.rsplit(":", 2)[0]).exists()}
        memo[identity] = h.hexdigest()
        snapshots_dir().mkdir(parents=True, exist_ok=True)
        tmp = memo_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(memo, indent=1))
        os.replace(tmp, memo_file)
    return memo[identity]


def cached(key: str) -> Path:
    return snapshots_dir() / "fabric-up" / key


def restore_cached(key: str, share_dir: str = ""):
    """The fabric of cached snapshot `key` brought up (its QEMUs ready
    for `share_dir`, see load); None when there is none, or it could not
    be restored (then it is deleted, and the fabric boots)."""
    source = cached(key)
    if not (source / META).is_file():
        return None
    ui.detail(f"restoring the fabric from its snapshot {source} (--boot boots it instead)")
    try:
        fab, restored = load(source, share_dir)
    except (ui.StepFailed, OSError) as e:
        ui.warn(f"the fabric's snapshot could not be restored; it is deleted, and the fabric "
                f"boots: {e}")
        shutil.rmtree(source, ignore_errors=True)
        return None
    os.utime(source / META)  # used: kept longest
    ui.detail(f"restored in {restored.total_s:.1f} s: the guests ran again after "
              f"{restored.loaded_s:.1f} s, every port ACTIVE {restored.active_s:.1f} s later")
    return fab


def save_cached(fab: fabric.Fabric, key: str) -> bool:
    """Saves a fabric that just booted for the next `fabric up` to restore;
    a fabric that cannot be saved runs on, and the next one boots too.
    Whether it was saved."""
    ui.detail("saving a snapshot of the fabric for the next fabric up to restore")
    try:
        taken = save(fab, cached(key))
    except ui.StepFailed as e:
        ui.warn(f"the fabric could not be saved for the next fabric up: {e}")
        return False
    ui.detail(f"saved to {taken.path} in {taken.total_s:.1f} s ({taken.mb:.0f} MB; the guests "
              f"paused {taken.paused_ms} ms)")
    made = sorted((p for p in cached(key).parent.iterdir() if (p / META).is_file()),
                  key=lambda p: (p / META).stat().st_mtime, reverse=True)
    for old in made[CACHED_KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return True


# What a guest's kernel says when its VM generation ID changed.
RESEEDED = "crng reseeded due to virtual machine fork"


def not_unique(fab: fabric.Fabric) -> list:
    """What the guests of a restored fabric share that must be each one's
    own, or kept from the snapshot that must be new: a guest whose kernel
    did not reseed its random numbers, whose ssh host key is not the one
    this fabric made for it, two guests of one port GID or IPoIB
    address. Empty when all is as it must be."""
    problems, gids, addresses = [], {}, {}
    keys = Path(fab.run_dir) / "ssh"
    for vm in fab.vms:
        out = fabric.exec_in(vm.name, ["sh", "-c", (
            "dmesg | grep -c 'random: " + RESEEDED + "'; "
            "cut -d' ' -f2 /etc/ssh/ssh_host_ed25519_key.pub; "
            f"cat /sys/class/infiniband/{vm.device}/ports/1/gids/0; "
            "a=$(ip -4 -o addr show dev ib0 2>/dev/null | awk '{print $4}'); "
            "echo ${a:-none}")], timeout=30).out.split()
        if len(out) < 4:
            problems.append(f"{vm.name}: could not read its seeds, keys and addresses: {out}")
            continue
        reseeds, key, gid, address = out[:4]
        if reseeds == "0":
            problems.append(f"{vm.name}: its kernel did not reseed its random numbers "
                            f"('{RESEEDED}' is not in its log)")
        if key != (keys / f"host-{vm.name}.pub").read_text().split()[1]:
            problems.append(f"{vm.name}: its ssh host key is not the one this fabric made")
        gids.setdefault(gid, []).append(vm.name)
        addresses.setdefault(address, []).append(vm.name)
    addresses.pop("none", None)  # IPoIB not configured (yet): nothing to share
    for what, seen in (("port GID", gids), ("IPoIB address", addresses)):
        problems += [f"{', '.join(names)} share the {what} {value}"
                     for value, names in seen.items() if len(names) > 1]
    return problems
