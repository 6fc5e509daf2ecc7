"""./pib fabric up|down|status: a set of guests, each with a pib-hca, on a
management Ethernet built from a vde_switch UNIX socket (no host
interface is touched)."""

import json
import os
import re
import shutil
import signal
import socket
import sys
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pibctl import crash_report, guest_ssh, own_kernel, paths, qga, ui
from pibctl.own_kernel import OwnKernel
from pibctl.topology import Topology, TopologyError, chain

MGMT_NET = "10.77.0"  # guest-internal addresses; the host never joins this net
IPOIB_NET = "10.78.0"  # the guests' IPoIB interfaces (ib0): vmN-ib is IPOIB_NET.N
STATE_FILE = "fabric.json"


# How an HCA's port reaches its switch (the device's `rings` property).
CABLES = ("ring", "stream")


@dataclass
class Vm:
    name: str
    index: int
    dir: str
    pid: int = 0
    cables: list = field(default_factory=list)  # [switch, port] per HCA port
    command: list = field(default_factory=list)  # how its QEMU was started
    personality: str = "pib"  # its HCA's: pib, or mlx5 (a ConnectX)

    @property
    def device(self) -> str:
        """The name its driver gives its HCA: pib_0, or mlx5_0 for a ConnectX."""
        return "mlx5_0" if self.personality == "mlx5" else "pib_0"

    @property
    def switch(self) -> str:
        """The switch port 1 is cabled to."""
        return self.cables[0][0]

    @property
    def switch_port(self) -> int:
        return self.cables[0][1]

    @property
    def path(self) -> Path:
        return Path(self.dir)

    @property
    def qga_sock(self) -> Path:
        return self.path / "qga.sock"

    @property
    def console_sock(self) -> Path:
        return self.path / "console.sock"

    @property
    def console_log(self) -> Path:
        return self.path / "console.log"

    @property
    def qemu_log(self) -> Path:
        return self.path / "qemu.log"

    def set_aside_qemu_log(self, pid: int) -> Path:
        """The log of QEMU `pid` is renamed for good (qemu.PID.log) before
        another QEMU of this VM starts with the same -D file, which QEMU
        truncates as it opens it: the old one goes on writing there, and
        its last lines (traces, guest errors) stay for the log gate and
        for failure reports."""
        aside = self.path / f"qemu.{pid}.log"
        if self.qemu_log.exists():
            os.replace(self.qemu_log, aside)
        return aside

    @property
    def qemu_logs(self) -> list:
        """Every log this VM's QEMUs wrote, oldest first: those set aside
        as the guest moved, then the current QEMU's."""
        aside = sorted(self.path.glob("qemu.*.log"), key=lambda p: p.stat().st_mtime_ns)
        return aside + [self.qemu_log]

    @property
    def node_guid(self) -> int:
        # Locally administered EUI-64 "02:50:49:42" ("PIB") + VM index.
        return 0x0250494200000000 | (self.index << 8)


@dataclass
class Fabric:
    run_dir: str
    accel: str
    topology: dict = field(default_factory=dict)  # a Topology, as saved
    vms: list = field(default_factory=list)
    mgmt_switch_pid: int = 0  # the management network's vde_switch
    ib_switch_pids: dict = field(default_factory=dict)  # switch name -> pid
    kernel: str = ""  # what the guests boot: the bundled image unless given
    initrd: str = ""
    cable: str = "ring"  # HCA to switch: "ring" (shared memory) or "stream"
    # Guests the boot started afresh (a TCG hang, _wait_ready): their
    # switch ports saw the cable go down once, as a power-cycled node's do.
    booted_again: list = field(default_factory=list)
    # The snapshot the fabric was restored from (snapshot.py); "" if booted.
    restored_from: str = ""
    # Whether the fabric was saved for the next `fabric up` once it booted:
    # the save paused the guests, and a switch discards what is sent to a
    # port whose guest has not run again yet (PortXmitDiscards).
    saved_after_boot: bool = False
    # The host directory every guest has at the same path (share.py); ""
    # if none. Not in the command lines a snapshot is keyed on. Mounted
    # once the fabric is up (and any snapshot of it taken).
    share: str = ""
    share_mounted: bool = False

    @property
    def topo(self) -> Topology:
        return Topology.from_dict(self.topology)

    def ib_switch_dir(self, name: str) -> Path:
        return Path(self.run_dir) / name

    def switch_log(self, name: str) -> Path:
        return Path(self.run_dir) / f"{name}.log"

    def vm(self, name: str) -> Vm:
        for vm in self.vms:
            if vm.name == name:
                return vm
        names = ", ".join(v.name for v in self.vms)
        raise ui.StepFailed(f"no VM named {name} in the fabric (have: {names})")

    def save(self) -> None:
        # Whole or not at all: a reader (another thread's exec) never sees half.
        state = Path(self.run_dir) / STATE_FILE
        tmp = state.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, state)


def load():
    """The running fabric's state, or None when no fabric is up."""
    state = paths.run_dir() / STATE_FILE
    if not state.is_file():
        return None
    data = json.loads(state.read_text())
    data["vms"] = [Vm(**v) for v in data["vms"]]
    if "switch_pid" in data:  # a fabric started before the field's rename
        data["mgmt_switch_pid"] = data.pop("switch_pid")
    return Fabric(**data)


# Who took each fabric of a run directory down, for a `require` that
# finds none: a fabric that went from under its user says by whom.
DOWNS_FILE = "downs.log"


def _note_down(fabric: Fabric, gone: list) -> None:
    line = (f"{time.strftime('%H:%M:%S')} fabric down by pid {os.getpid()} "
            f"({' '.join(sys.argv)[:300]}; PIB_RUN_DIR={os.environ.get('PIB_RUN_DIR', '')})"
            + (f"; already gone: {', '.join(gone)}" if gone else ""))
    try:
        with open(Path(fabric.run_dir) / DOWNS_FILE, "a") as log:
            log.write(line + "\n")
    except OSError:
        pass


def last_down() -> str:
    """The last fabric down in the run directory, as _note_down wrote it."""
    try:
        lines = (paths.run_dir() / DOWNS_FILE).read_text().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def require() -> Fabric:
    fabric = load()
    if fabric is None:
        last = last_down()
        raise ui.StepFailed("no fabric is up; start one with ./pib fabric up"
                            + (f" (the last one in {paths.run_dir()}: {last})" if last else ""))
    return fabric


def cmdline(pid: int):
    """pid's command line; None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None


def ours(pid: int, run_dir: str) -> bool:
    """True if pid is alive and was started by us for this run directory
    (guards against killing an unrelated process that reused the pid; a
    process of $PIB_CACHE/run2 is not one of $PIB_CACHE/run's)."""
    return names_run_dir(cmdline(pid) or "", run_dir)


def names_run_dir(command_line: str, run_dir: str) -> bool:
    """True if `command_line` names a path inside `run_dir`, as every
    process a fabric starts does (its sockets, logs)."""
    return os.path.join(run_dir, "") in command_line


def _running_child(pid: int) -> bool:
    """True for a child of this process that has not ended. Its command
    line is ours by construction, but may read empty for a moment: the
    host kernel gives none while it cannot reach the process's memory
    (seen under memory pressure, as one fabric's guests go and the next
    one's come)."""
    try:  # WNOWAIT: an ended child stays to be reaped by _exit_status
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


def _kill(pid: int, run_dir: str, what: str) -> None:
    if not pid or not ours(pid, run_dir):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and ours(pid, run_dir):
        time.sleep(0.1)
    if ours(pid, run_dir):
        ui.warn(f"{what} (pid {pid}) ignored SIGTERM; killing it")
        os.kill(pid, signal.SIGKILL)
        while ours(pid, run_dir):
            time.sleep(0.05)


def _wait_pidfile(path: Path, what: str, timeout: float = 10) -> int:
    """A daemon writes its pidfile after forking: wait for it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            text = path.read_text().strip()
            if text:
                return int(text)
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    raise ui.StepFailed(f"{what} did not write {path} within {timeout:.0f} s")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def host_tsc_khz() -> int:
    """The host's TSC frequency in kHz, as its kernel measured it at boot
    ("tsc: Detected 2095.999 MHz processor"), or failing that as
    /proc/cpuinfo gives it on a CPU whose TSC does not change with its
    clock; 0 when neither says."""
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        log = ""
    m = (re.search(r"tsc: Refined TSC clocksource calibration: ([\d.]+) MHz", log)
         or re.search(r"tsc: Detected ([\d.]+) MHz", log))
    if not m:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
        flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
        if flags and {"constant_tsc", "nonstop_tsc"} <= set(flags.group(1).split()):
            m = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.M)
    return round(float(m.group(1)) * 1000) if m else 0


def _tsc_args(accel: str) -> str:
    """tsc_early_khz for a TCG guest, whose TSC is the host's. The kernel
    otherwise measures the TSC against the emulated PIT at boot, and on a
    busy host that fails ('tsc: Unable to calibrate against PIT') or comes
    out wrong; a secondary vCPU then arms its TSC-deadline timer by the
    wrong frequency before the refined calibration corrects it, sleeps far
    past its tick, and the boot hangs with RCU stalls on that CPU."""
    khz = host_tsc_khz() if accel == "tcg" else 0
    return f"tsc_early_khz={khz} " if khz else ""


def _qemu_command(fabric: Fabric, vm: Vm, memory: int, cpus: int, trace: str,
                  kernel_args: str = "") -> list:
    from pibctl import share  # pylint: disable=import-outside-toplevel (it imports us)

    qemu = paths.qemu_binary()
    # la57=off: 4-level paging, a 47-bit address space for each process.
    # Under 5-level paging mlx5_ib sizes an implicit on-demand region's
    # KSM table for 2^56 bytes, 2^26 entries (1 GiB, zeroed by UMR at each
    # registration), which the ConnectX personality refuses (docs/mlx5.md
    # §10.7); most hosts run 4-level paging anyway.
    if fabric.accel == "kvm":
        accel = ["-accel", "kvm", "-cpu", "host,la57=off"]
    else:
        # Without ERMS and FSRM, which say `rep movsb` is the fast way to
        # copy: TCG runs a REP string instruction one iteration at a time,
        # each about as dear as an instruction, so byte-wise copies are the
        # slowest. The kernel then copies with `rep movsq` or unrolled
        # moves, and glibc with vector loops: unpacking the initramfs at
        # boot took 4.4 s instead of 6.1 (13.2 s when it was compressed).
        accel = ["-accel", "tcg", "-cpu", "max,erms=off,fsrm=off,la57=off"]
    # tsc=reliable: the guest's TSC is the host's clock (TCG) or the CPU's
    # own (KVM), steady on every vCPU. Without it the kernel's watchdog
    # compares it at boot with jiffies, which lag on a busy host, marks it
    # unstable and keeps time with the ACPI PM timer instead: a port read,
    # a BQL round trip under TCG, for every clock read.
    append = (
        "console=ttyS0,115200 loglevel=5 panic=-1 mitigations=off tsc=reliable rdinit=/init "
        f"{_tsc_args(fabric.accel)}"
        f"pibvm.name={vm.name} pibvm.index={vm.index} pibvm.vms={len(fabric.vms)} pibvm.net={MGMT_NET} "
        f"pibvm.ibnet={IPOIB_NET} {kernel_args}"
    ).strip()
    run = Path(fabric.run_dir)
    cmd = [
        qemu, "-name", vm.name, "-machine", "q35,dump-guest-core=off", *accel,
        "-m", str(memory), "-smp", str(cpus),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        *paths.QEMU_FIRMWARE_ARGS,
        "-kernel", fabric.kernel or paths.kernel_image(),
        "-initrd", fabric.initrd or paths.initrd_image(), "-append", append,
        "-chardev", f"socket,id=console,path={vm.console_sock},server=on,wait=off,"
        f"logfile={vm.console_log},logappend=off",
        "-serial", "chardev:console",
        "-device", "virtio-serial-pci,id=vser",
        "-chardev", f"socket,id=qga,path={vm.qga_sock},server=on,wait=off",
        "-device", "virtserialport,bus=vser.0,chardev=qga,name=org.qemu.guest_agent.0",
        # A guest restored from a snapshot learns it is a copy, and its
        # kernel reseeds its random numbers (snapshot.py).
        "-device", "vmgenid",
        # Free page reporting: the guest tells QEMU which of its pages are
        # free, and QEMU drops them. The kernel poisons the initramfs's
        # pages with 0xcc when it frees them after unpacking it (some
        # 370 MB, 41% of a booted guest's saved RAM), and a live move or
        # a snapshot carries every page that is not zero: without this,
        # each carried the freed initramfs too (docs/migration.md).
        "-device", "virtio-balloon-pci,id=balloon,free-page-reporting=on",
        "-qmp", f"unix:{vm.path / 'qmp.sock'},server=on,wait=off",
        "-netdev", f"vde,id=mgmt,sock={run / 'mgmt.vde'}",
        "-device", f"virtio-net-pci,netdev=mgmt,mac=52:54:00:77:00:{vm.index:02x},romfile=",
        "-device", "pcie-root-port,id=ib-rp,chassis=1,slot=1",
        *share.qemu_port_args(),
        *guest_ssh.qemu_args(run, vm),
    ]
    # Each HCA port is cabled to a switch port's socket; QEMU reconnects by
    # itself when the switch restarts.
    hca = (f"pib-hca,id=hca0,bus=ib-rp,personality={vm.personality},"
           f"node-guid=0x{vm.node_guid:016x},ports={len(vm.cables)},"
           f"rings={'on' if fabric.cable == 'ring' else 'off'}")
    for n, (switch, port) in enumerate(vm.cables, 1):
        sock = fabric.ib_switch_dir(switch) / f"port{port}.sock"
        cmd += ["-chardev", f"socket,id=ib{n},path={sock},reconnect-ms=1000"]
        hca += f",port{n}=ib{n}"
    cmd += ["-device", hca, "-d", "guest_errors", "-D", vm.qemu_log]
    for pattern in filter(None, trace.split(",")):
        cmd += ["-trace", pattern]
    return [str(c) for c in cmd]


def simulated_fabric_text(switch) -> str:
    """A simulated switch's fabric file: written from its spec, its CA
    places spread over the fabric taken by the guests."""
    from pibctl import sim_fabric  # pylint: disable=import-outside-toplevel
    try:
        fab = sim_fabric.parse_spec(switch.simulate)
        return sim_fabric.render(fab, sim_fabric.place(fab, switch.ports))
    except sim_fabric.FabricError as e:
        raise ui.StepFailed(f"{switch.name}: {e}") from None


def _simulated_switch_command(fabric: Fabric, switch, restore: Path = None) -> list:
    """A simulated fabric's process, from the state `restore` if given (the
    same fabric file's: snapshot.cache_key holds its text)."""
    text = simulated_fabric_text(switch)
    directory = fabric.ib_switch_dir(switch.name)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "fabric.txt").write_text(text)
    cmd = [str(paths.fabric_switch_binary()), "--fabric", str(directory / "fabric.txt"),
           "--socket-dir", str(directory)]
    if restore:
        cmd += ["--restore", str(restore)]
    for port, spec in [*switch.faults.items(), *switch.link_faults.items()]:
        cmd += ["--fault", f"{port}={','.join(spec.split())}"]
    for port, path in switch.captures.items():
        cmd += ["--capture", f"{port}={path}"]
    return cmd + ["--control", str(control_socket(fabric, switch.name))]


def _switch_command(fabric: Fabric, topo: Topology, switch, restore: Path = None) -> list:
    if switch.simulate:
        return _simulated_switch_command(fabric, switch, restore)
    cmd = [str(paths.fabric_switch_binary()), "--ports", str(switch.ports),
           "--socket-dir", str(fabric.ib_switch_dir(switch.name)), "--guid", hex(switch.guid),
           "--name", switch.name, "--verbose"]
    # Of the two switches a link joins, the one named second dials the
    # other's socket (and retries, 1 s doubling to 30 s, until it is there).
    for link in topo.links:
        if link.b == switch.name:
            cmd += ["--connect",
                    f"{link.b_port}={fabric.ib_switch_dir(link.a) / f'port{link.a_port}.sock'}"]
    for port, address in switch.tcp_listen.items():
        cmd += ["--tcp", f"{port}={address}"]
    for port, address in switch.tcp_connect.items():
        cmd += ["--connect-tcp", f"{port}={address}"]
    for port, spec in switch.faults.items():
        cmd += ["--fault", f"{port}={','.join(spec.split())}"]
    for port, path in switch.captures.items():
        cmd += ["--capture", f"{port}={path}"]
    cmd += ["--control", str(control_socket(fabric, switch.name))]
    if restore:
        cmd += ["--restore", str(restore)]
    return cmd


def control_socket(fabric: Fabric, switch: str) -> Path:
    return fabric.ib_switch_dir(switch) / "control.sock"


def control_answer(path, command: str, timeout: float = 10) -> str:
    """One command line to the control socket at `path`, and all of the
    switch's answer (docs/wire.md); raises OSError when it does not answer."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(path))
        s.sendall(command.encode() + b"\n")
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer.decode(errors="replace")


def switch_control(fabric: Fabric, switch: str, command: str, timeout: float = 10) -> str:
    """Sends one command line to a switch's control socket; returns its
    answer. Raises StepFailed when the switch does not answer or says error."""
    try:
        answer = control_answer(control_socket(fabric, switch), command, timeout)
    except OSError as e:
        raise ui.StepFailed(f"{switch}: its control socket did not answer: {e}") from None
    text = answer.rstrip("\n")
    if not text.startswith("ok"):
        raise ui.StepFailed(f"{switch}: {text}")
    return text[2:].lstrip()


def fault(spec_port: str, words) -> int:
    """./pib fabric fault SWITCH:PORT SPEC... | clear, or SWITCH:GUID:PORT
    for the end of a link inside a simulated fabric."""
    fabric = require()
    parts = spec_port.split(":")
    if len(parts) not in (2, 3) or not all(parts) or not parts[-1].isdigit():
        raise ui.StepFailed(f"expected SWITCH:PORT or SWITCH:GUID:PORT, got {spec_port!r}")
    switch, port = parts[0], parts[-1]
    try:
        sw = fabric.topo.switch(switch)
    except KeyError:
        raise ui.StepFailed(f"no switch named {switch} in this fabric") from None
    if len(parts) == 3:
        if not sw.simulate:
            raise ui.StepFailed(f"{switch} is not a simulated fabric: SWITCH:PORT names its ports")
        where = f"link {parts[1]} {port}"
        command = f"{where} clear" if words == ["clear"] else f"{where} fault {' '.join(words)}"
    else:
        command = f"clear {port}" if words == ["clear"] else f"fault {port} {' '.join(words)}"
    ui.info(switch_control(fabric, switch, command))
    return 0


def start_ib_switches(fabric: Fabric, restore: Path = None) -> None:
    """Starts every switch of the topology (from the states saved in
    `restore`, when given), each one that dials another after that one:
    a dial that finds no socket yet is retried only a second later."""
    topo = fabric.topo
    left = [switch.name for switch in topo.switches]
    while left:
        # One that dials no switch still to start (in a ring, any).
        ready = [name for name in left
                 if not any(link.b == name and link.a in left for link in topo.links)]
        name = (ready or left)[0]
        start_switch(fabric, name, restore=restore / f"{name}.state" if restore else None)
        left.remove(name)


def start_switch(fabric: Fabric, name: str, restore: Path = None) -> None:
    """Starts one switch and waits until its sockets listen; with
    `restore`, from the state a switch saved there (snapshot.py)."""
    topo = fabric.topo
    switch = topo.switch(name)
    fabric.ib_switch_dir(name).mkdir(exist_ok=True)
    log_path = fabric.switch_log(name)
    start = log_path.stat().st_size if log_path.exists() else 0
    with open(log_path, "a") as log:
        proc = subprocess.Popen(_switch_command(fabric, topo, switch, restore),
                                stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    fabric.ib_switch_pids[name] = proc.pid
    fabric.save()
    # The switch logs its banner once every socket is bound.
    deadline = time.monotonic() + 10
    while True:
        with open(log_path, errors="replace") as log:
            log.seek(start)
            if "sockets in" in log.read():
                return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ui.StepFailed(f"{name} did not start; see {log_path}\n"
                                + log_path.read_text(errors="replace")[-2000:])
        time.sleep(0.05)


def switch_running(fabric: Fabric, name: str) -> bool:
    return ours(fabric.ib_switch_pids.get(name, 0), fabric.run_dir)


def stopped_processes(fabric: Fabric) -> list:
    """The fabric's QEMUs and switches (IB and management) that no longer run."""
    gone = [vm.name for vm in fabric.vms if not ours(vm.pid, fabric.run_dir)]
    gone += [name for name in fabric.ib_switch_pids if not switch_running(fabric, name)]
    if not ours(fabric.mgmt_switch_pid, fabric.run_dir):
        gone.append("the management switch")
    return gone


def ended_report(vm: Vm) -> str:
    """How a guest's QEMU that no longer runs ended, with its logs and, for
    a crash, its backtrace."""
    status = _exit_status(vm.pid)
    return f"{vm.name}: QEMU {status}\n" + _qemu_logs(vm, status)


def stop_switch(fabric: Fabric, name: str) -> None:
    pid = fabric.ib_switch_pids.pop(name, 0)
    fabric.save()
    _kill(pid, fabric.run_dir, f"fabric switch {name}")
    _reap(pid)


def stop_ib_switch(fabric: Fabric) -> None:
    for name in list(fabric.ib_switch_pids):
        stop_switch(fabric, name)


def _check_setup() -> None:
    for f in (paths.qemu_binary(), paths.kernel_image(), paths.initrd_image(),
              paths.fabric_switch_binary()):
        if not f.is_file():
            raise ui.StepFailed(f"{f} is missing; run ./pib setup first")


def _lines(path: Path):
    """A log's lines, or None when it cannot be read."""
    try:
        return path.read_text(errors="replace").splitlines()
    except OSError:
        return None


def _tail(path: Path, lines: int, missing: str) -> str:
    text = _lines(path)
    return missing if text is None else "\n".join(text[-lines:])


def said_since(path: Path, offset: int) -> list:
    """The non-empty lines a process wrote to `path` after its first
    `offset` bytes (a QEMU's stderr since a command was given)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()]


def size_of(path: Path) -> int:
    """`path`'s size, 0 while it does not exist: an offset for said_since."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def qemu_log_tail(vm: Vm, lines: int = 30) -> str:
    """The current QEMU's last lines, after those of the QEMU it replaced
    (a move) when there was one: a failure after a move is often the old
    one's story."""
    tail = _tail(vm.qemu_log, lines, "(no qemu.log)")
    before = vm.qemu_logs[:-1]
    if not before:
        return tail
    return (f"(the QEMU before the last move, {before[-1].name}:)\n"
            f"{_tail(before[-1], lines, '(gone)')}\n(the current QEMU, qemu.log:)\n{tail}")


# The RC timer's trace events, each a different story of a QP that heard
# nothing, and what a lost link made QPs say: a failure's report counts
# them before any tail is cut short.
RC_TIMER_EVENTS = ("rc_timeout", "rc_timeout_unspent", "rc_timeout_excused",
                   "rc_timeout_behind", "rc_retry_exceeded", "rc_resent_after_loss",
                   "rc_told_after_loss", "link_discards_told")


def rc_timer_summary(vm: Vm) -> str:
    """How often each RC timer event is in the current qemu.log."""
    try:
        text = vm.qemu_log.read_text(errors="replace")
    except OSError:
        return "(no qemu.log)"
    words = [line.split(" ", 2)[0].removeprefix("pib_hca_") for line in text.splitlines()]
    return ", ".join(f"{e} {words.count(e)}" for e in RC_TIMER_EVENTS)


def switch_log_tail(fab: Fabric, name: str, lines: int = 10) -> str:
    return _tail(fab.switch_log(name), lines, "(no log)")


# Where a guest kernel's report of its own failure begins: a report shows
# the console from there, whose first lines say what the kernel hit (a
# cold run's guest died in boot with only its register dump in the tail).
OOPS_STARTS = ("------------[ cut here ]------------", "BUG:", "Oops:", "general protection fault",
               "invalid opcode:", "int3:", "Kernel panic")
OOPS_LINES = 80


def console_tail(vm: Vm, lines: int = 30) -> str:
    """The console's last `lines`, and before them the first OOPS_LINES of
    a kernel failure report that begins earlier."""
    text = _lines(vm.console_log)
    if text is None:
        return "(no console log)"
    start = next((i for i, line in enumerate(text) if any(s in line for s in OOPS_STARTS)), None)
    if start is None or start >= len(text) - lines:
        return "\n".join(text[-lines:])
    report = text[start:min(start + OOPS_LINES, len(text) - lines)]
    return "\n".join([*report, "[...]", *text[-lines:]])


def _exit_status(pid: int, wait: float = 3.0) -> str:
    """How our child QEMU ended, from its wait status (it is reaped here).
    A process that is exiting has no command line yet is not reaped: it
    gets `wait` seconds to finish dying, so a crash reads as one."""
    deadline = time.monotonic() + wait
    while True:
        try:
            reaped, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return "exited"
        if reaped or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if reaped == 0:
        return "is running under another command line"
    if os.WIFSIGNALED(status):
        return f"was killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exited with status {os.WEXITSTATUS(status)}"


def _qemu_logs(vm: Vm, status: str = "") -> str:
    """The tails of everything QEMU and the guest wrote, for a failure report,
    and the backtrace of a QEMU whose `status` (_exit_status) is a signal."""
    parts = []
    for path in (vm.path / "qemu.stderr", vm.qemu_log):
        text = path.read_text(errors="replace")[-3000:] if path.exists() else "(missing)"
        parts.append(f"--- {path} ---\n{text}")
    parts.append(f"--- console of {vm.name} ---\n{console_tail(vm)}")
    crashes = _host_kernel_lines(vm.pid)
    if crashes:
        parts.append(f"--- host kernel on pid {vm.pid} ---\n{crashes}")
    # A status of "exited" may hide a crash: another Popen reaped QEMU.
    trace = crash_report.backtrace(vm.path, vm.pid, vm.command[0],
                                   killed=status.startswith("was killed by"))
    if trace:
        parts.append(f"--- backtrace of QEMU {vm.pid} ---\n{trace}")
    return "\n".join(parts)


def _host_kernel_lines(pid: int) -> str:
    """What the host kernel said about a process (a segfault's address and
    instruction pointer), when it may be read."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return "\n".join(line for line in out.splitlines() if f"[{pid}]:" in line)


# What a guest kernel prints when a vCPU halted in early boot and its
# local APIC timer never woke it: a hang of TCG guests on an overloaded
# host (seen while other guests boot and fuzzers run beside them; the
# stalled CPU idles in default_idle with its timer softirqs frozen, before
# any driver of ours has loaded). It does not end by itself.
EARLY_TIMER_STALL = "kthread timer wakeup didn't happen"


def _stalled_in_early_boot(vm: Vm, since: float) -> bool:
    """Whether the console says so, in what was written since `since` (a
    time.time()): the log of a guest's earlier life is not this boot's."""
    try:
        return (vm.console_log.stat().st_mtime >= since
                and EARLY_TIMER_STALL in vm.console_log.read_text(errors="replace"))
    except OSError:
        return False


def _boot_again(fabric: Fabric, vm: Vm) -> None:
    """A guest whose timer stalled in early boot is started afresh (once
    per wait): its console so far is shown, so the hang stays visible."""
    ui.detail(f"{vm.name}: its kernel's timer stalled in early boot ('{EARLY_TIMER_STALL}', a "
              f"TCG hang under host load, before our driver loads); booting it again. Its "
              f"console was:\n{console_tail(vm, 12)}")
    _kill(vm.pid, fabric.run_dir, f"QEMU of {vm.name}")
    _reap(vm.pid)
    _start_qemu(fabric, vm)


def _record_booted_again(fabric: Fabric, vm: Vm) -> None:
    if vm.name not in fabric.booted_again:
        fabric.booted_again.append(vm.name)
        fabric.save()


def _wait_ready(fabric: Fabric, timeout: float, vms=None) -> None:
    start = time.monotonic()
    pending = list(vms or fabric.vms)
    booted_again = set()
    since = time.time()
    last_report = start
    while pending:
        for vm in list(pending):
            if not _running_child(vm.pid) and not ours(vm.pid, fabric.run_dir):
                status = _exit_status(vm.pid)
                raise ui.StepFailed(f"{vm.name}: QEMU {status} during boot\n" +
                                    _qemu_logs(vm, status))
            if vm.name not in booted_again and _stalled_in_early_boot(vm, since):
                booted_again.add(vm.name)
                _boot_again(fabric, vm)
                _record_booted_again(fabric, vm)
                continue
            if qga.ping(vm.qga_sock, timeout=2):
                ui.detail(f"{vm.name}: up after {time.monotonic() - start:.0f} s")
                pending.remove(vm)
        elapsed = time.monotonic() - start
        if pending and elapsed > timeout:
            vm = pending[0]
            raise ui.StepFailed(
                f"{vm.name} did not come up within {timeout:.0f} s\n"
                f"--- console of {vm.name} ---\n{console_tail(vm)}"
            )
        if pending and time.monotonic() - last_report > 20:
            ui.detail(f"[{elapsed:4.0f}s] waiting for {', '.join(v.name for v in pending)}")
            last_report = time.monotonic()
        if pending:
            time.sleep(0.25)  # each ping of a guest still booting waits 2 s itself


def port_states(fabric: Fabric) -> dict:
    """The state of every cabled IB port, as sysfs says it: {"vm1:1": "4: ACTIVE"}."""
    states = {}
    for vm in fabric.vms:
        for n in range(1, len(vm.cables) + 1):
            try:
                r = exec_in(vm.name, ["cat", f"/sys/class/infiniband/{vm.device}/ports/{n}/state"],
                            timeout=30)
                states[f"{vm.name}:{n}"] = r.out.strip()
            except ui.StepFailed:
                states[f"{vm.name}:{n}"] = "?"
    return states


def _cabled_switch_ports(fabric: Fabric) -> dict:
    """{switch: {port: what its cable leads to}} for the cables of the topology."""
    cabled = {switch.name: {} for switch in fabric.topo.switches}
    for vm in fabric.vms:
        for n, (switch, port) in enumerate(vm.cables, 1):
            cabled[switch][port] = f"{vm.name} port {n}"
    for switch in fabric.topo.switches:
        for port, other, other_port in fabric.topo.neighbours(switch.name):
            cabled[switch.name][port] = f"{other} port {other_port}"
    return cabled


def _switch_ports(fabric: Fabric, switch: str) -> dict:
    """{"port 2": "ACTIVE, link up", ...}: a switch's answer to "ports"."""
    lines = switch_control(fabric, switch, "ports", timeout=5).splitlines()
    return dict(line.split(": ", 1) for line in lines if ": " in line)


def switch_port_states(fabric: Fabric) -> dict:
    """The state of every cabled switch port, as the switch's control
    socket says it: {"switch1:2": "ACTIVE, link up"}."""
    states = {}
    for switch, ports in _cabled_switch_ports(fabric).items():
        try:
            answer = _switch_ports(fabric, switch)
        except ui.StepFailed:
            answer = {}
        for port in sorted(ports):
            states[f"{switch}:{port}"] = answer.get(f"port {port}", "?")
    return states


def wait_active(fabric: Fabric, timeout: float = 180) -> float:
    """Waits until every port is ACTIVE, the guests' and the switch ports
    their cables and the inter-switch cables plug into (a host port can be
    ACTIVE before the switch port facing it, and data through that one is
    dropped); returns how long it took."""
    start = time.monotonic()
    while True:
        states = port_states(fabric)
        states.update(switch_port_states(fabric))
        if all(s.startswith("ACTIVE") or s.endswith("ACTIVE") for s in states.values()):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise ui.StepFailed(
                f"ports not ACTIVE after {timeout:.0f} s: {states}\n--- opensm log (vm1) ---\n"
                + exec_in(fabric.vms[0].name, ["tail", "-20", "/run/opensm.log"], timeout=30).out)
        time.sleep(0.25)


def start_sm(fabric: Fabric) -> None:
    result = exec_in(fabric.vms[0].name, ["pib-start-sm"], timeout=60)
    if result.exitcode != 0:
        raise ui.StepFailed(f"opensm did not start in {fabric.vms[0].name}: {result.err}")


def stop_sm(fabric: Fabric) -> None:
    """Stops opensm in vm1. One whose port went away may not answer
    SIGTERM any more: it gets 1 s to end, then SIGKILL (looked at every
    0.1 s: a second's sleep per look cost the tests 5 s each time)."""
    result = exec_in(fabric.vms[0].name, [
        "sh", "-c", "kill -TERM $(pidof opensm) 2>/dev/null; for i in $(seq 10); do "
        "pidof opensm >/dev/null || exit 0; sleep 0.1; done; "
        "kill -KILL $(pidof opensm) 2>/dev/null; for i in $(seq 100); do "
        "pidof opensm >/dev/null || exit 0; sleep 0.1; done; exit 1"], timeout=60)
    if result.exitcode != 0:
        raise ui.StepFailed(f"opensm in {fabric.vms[0].name} outlived SIGKILL by 10 s")


def restart_sm(fabric: Fabric) -> None:
    """Restarts opensm in vm1 and waits until every port is ACTIVE again:
    after a driver reload, which takes a port from the SM."""
    stop_sm(fabric)
    start_sm(fabric)
    wait_active(fabric)


def up(vms: int = 2, accel: str = "tcg", memory: int = 2048, cpus: int = 1,
       timeout: float = 300, trace: str = "", sm: bool = True, switches: int = 1,
       topology: Topology = None, kernel_args: str = "", own: OwnKernel = None,
       mlx5: tuple = (), cable: str = "ring", boot: bool = False, share_dir: str = "") -> Fabric:
    """Boots a fabric: the given topology, or else a chain of `switches`
    switches with `vms` guests spread over them. `kernel_args` go to each
    guest's kernel command line; `own` is a kernel of the user's to boot
    instead of the bundled one; the guests named in `mlx5` get a ConnectX
    HCA (personality=mlx5). `cable` is how each HCA's port reaches its
    switch: "ring" (shared memory, docs/wire.md) or "stream". `share_dir`
    is a host directory every guest mounts at the same path (share.py).

    A fabric that was booted before is restored from the snapshot made
    after that boot (snapshot.py), unless `boot` says to boot it. Fabrics
    of a user's own kernel and of ConnectX guests always boot: the
    kernel is the one under development, and the ConnectX personality's
    state cannot be saved yet."""
    from pibctl import share, snapshot  # pylint: disable=import-outside-toplevel (they import us)

    if cable not in CABLES:
        raise ui.StepFailed(f"--cable {cable}: one of {', '.join(CABLES)}")
    share_dir = share.checked_dir(share_dir) if share_dir else ""
    _check_setup()
    clear_stale()
    existing = load()
    if existing is not None:
        raise AlreadyUp(f"a fabric is already up in {existing.run_dir}; ./pib fabric down first")
    try:
        topo = topology if topology is not None else chain(vms, switches)
    except TopologyError as e:
        raise ui.StepFailed(str(e)) from None
    for name in mlx5:
        guest = next((g for g in topo.guests if g.name == name), None)
        if guest is None:
            raise ui.StepFailed(f"--mlx5 {name}: the fabric has no VM of that name")
        guest.personality = "mlx5"
    if accel == "kvm" and not os.access("/dev/kvm", os.R_OK | os.W_OK):
        raise ui.StepFailed("--accel kvm needs a usable /dev/kvm")
    run = paths.run_dir()
    if run.exists():
        shutil.rmtree(run)
    run.mkdir(parents=True)
    fabric = Fabric(run_dir=str(run), accel=accel, topology=topo.to_dict(), cable=cable,
                    share=share_dir)
    if own is not None:
        fabric.kernel, fabric.initrd = str(own.kernel.resolve()), str(own_kernel.initrd(own))
    for guest in topo.guests:
        vm = Vm(name=guest.name, index=guest.index, dir=str(run / guest.name),
                cables=[list(c) for c in guest.cables], personality=guest.personality)
        fabric.vms.append(vm)
    for vm in fabric.vms:
        vm.command = _qemu_command(fabric, vm, memory, cpus, trace, kernel_args)
    ui.step(f"Fabric: {len(fabric.vms)} VMs and {len(topo.switches)} IB switches under "
            f"{accel.upper()}, {cable} cables, in {run}")
    # A user's own kernel is the one under development, booted each time.
    simulated = any(s.simulate for s in topo.switches)
    snapshot_key = ""
    if sm and own is None:
        snapshot_key = snapshot.cache_key(fabric)
        restored = None if boot else snapshot.restore_cached(snapshot_key, share_dir)
        if restored is not None:
            _attach_share(restored)
            return restored
        shutil.rmtree(run)  # what a failed restore left
        run.mkdir(parents=True)
    for vm in fabric.vms:
        vm.path.mkdir()
    guest_ssh.make(run, fabric.vms, _guest_names)
    try:
        start_mgmt_switch(fabric)
        start_ib_switches(fabric)
        for vm in fabric.vms:
            (vm.path / "qemu.cmdline").write_text(" ".join(vm.command) + "\n")
            _start_qemu(fabric, vm)
        ui.detail("booting (about 20 s under TCG, a few with KVM)")
        _wait_ready(fabric, timeout)
        if sm:
            ui.detail(f"starting opensm in {fabric.vms[0].name}; waiting for every port to be ACTIVE")
            start_sm(fabric)
            # opensm sweeps a simulated fabric's thousands of nodes from a
            # guest under TCG: minutes, not seconds.
            took = wait_active(fabric, timeout=1800 if simulated else 180)
            ui.detail(f"all ports ACTIVE {took:.0f} s after opensm started")
        if snapshot_key:
            fabric.saved_after_boot = snapshot.save_cached(fabric, snapshot_key)
    except BaseException:
        down(quiet=True)
        raise
    _attach_share(fabric)
    return fabric


def _attach_share(fabric: Fabric, vms=None) -> None:
    """Mounts the fabric's share in `vms` (every guest by default), after
    any snapshot was taken: QEMU cannot save a guest with it mounted."""
    from pibctl import share  # pylint: disable=import-outside-toplevel (it imports us)

    if not fabric.share:
        return
    try:
        took = share.attach(fabric, vms)
    except BaseException:
        if vms is None:
            down(quiet=True)
        raise
    where = "every guest" if vms is None else ", ".join(v.name for v in vms)
    ui.detail(f"{fabric.share} mounted in {where} in {took:.1f} s")


def start_mgmt_switch(fabric: Fabric) -> None:
    """The management network's switch: vde_switch daemonises and writes
    its pid."""
    run = Path(fabric.run_dir)
    subprocess.run(
        ["vde_switch", "--sock", run / "mgmt.vde", "--daemon",
         "--pidfile", run / "vde_switch.pid", "--mgmt", run / "mgmt.vde.ctl"],
        check=True, stdin=subprocess.DEVNULL,
    )
    fabric.mgmt_switch_pid = _wait_pidfile(run / "vde_switch.pid", "vde_switch")
    fabric.save()


def _guest_names(vm: Vm) -> list:
    """What a guest's /etc/hosts (rc.boot) calls a VM, and its addresses."""
    names = [vm.name, f"vm{vm.index}", f"vm{vm.index}-ib", f"{MGMT_NET}.{vm.index}",
             f"{IPOIB_NET}.{vm.index}"]
    return list(dict.fromkeys(names))


def start_process(vm: Vm, extra=()) -> None:
    """Starts `vm.command` (its QEMU) and `extra` arguments in the guest's
    directory with cores allowed: a crash leaves its core there for the
    failure report's backtrace (crash_report)."""
    crash_report.allow_core_dumps()  # inherited: no preexec_fn, which threads make unsafe
    with open(vm.path / "qemu.stderr", "a") as err:
        proc = subprocess.Popen([*vm.command, *extra], stdin=subprocess.DEVNULL, stdout=err,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=vm.path)
    vm.pid = proc.pid


def _start_qemu(fabric: Fabric, vm: Vm) -> None:
    from pibctl import share  # pylint: disable=import-outside-toplevel (it imports us)

    start_process(vm, share.qemu_backend_args(fabric.share))
    fabric.save()


def kill_vm(fabric: Fabric, name: str) -> None:
    """Kills a guest's QEMU at once (SIGKILL), as a crash would."""
    vm = fabric.vm(name)
    if ours(vm.pid, fabric.run_dir):
        os.kill(vm.pid, signal.SIGKILL)
        while ours(vm.pid, fabric.run_dir):
            time.sleep(0.05)
    _reap(vm.pid)


def restart_vm(fabric: Fabric, name: str, timeout: float = 300) -> None:
    """Starts a guest's QEMU again as `fabric up` did (stopping it first if
    it runs), waits for the boot and for every port to be ACTIVE."""
    vm = fabric.vm(name)
    _kill(vm.pid, fabric.run_dir, f"QEMU of {vm.name}")
    _reap(vm.pid)
    _start_qemu(fabric, vm)
    _wait_ready(fabric, timeout, [vm])
    wait_active(fabric)
    _attach_share(fabric, [vm])


def clear_stale() -> bool:
    """Clears the state a fabric left when none of its processes runs any
    more (a run killed before its fabric down, a host that rebooted), so
    that it does not stop the next fabric up; returns whether it did. A
    fabric with any process still running is left alone."""
    fabric = load()
    if fabric is None:
        return False
    everything = len(fabric.vms) + len(fabric.ib_switch_pids) + 1
    if len(stopped_processes(fabric)) < everything:
        return False
    ui.info(f"clearing the state of a fabric in {fabric.run_dir} none of whose processes runs")
    down(quiet=True)
    return True


class AlreadyUp(ui.StepFailed):
    """A fabric is up in the run directory: someone else's, which whoever
    failed to bring theirs up must leave alone."""


def down(quiet: bool = False) -> None:
    fabric = load()
    if fabric is None:
        if not quiet:
            ui.info("no fabric is up")
        return
    _note_down(fabric, stopped_processes(fabric))
    for vm in fabric.vms:
        _kill(vm.pid, fabric.run_dir, f"QEMU of {vm.name}")
        _reap(vm.pid)
    _kill(fabric.mgmt_switch_pid, fabric.run_dir, "vde_switch")
    stop_ib_switch(fabric)
    for sock in Path(fabric.run_dir).rglob("*.sock"):
        sock.unlink(missing_ok=True)
    (Path(fabric.run_dir) / STATE_FILE).unlink(missing_ok=True)
    if not quiet:
        ui.info(f"fabric down ({len(fabric.vms)} VMs stopped; logs kept in {fabric.run_dir})")


def status(queues: bool = False) -> int:
    fabric = load()
    if fabric is None:
        ui.info("no fabric is up")
        return 1
    ui.info(f"fabric in {fabric.run_dir} ({fabric.accel})")
    switch = "running" if ours(fabric.mgmt_switch_pid, fabric.run_dir) else "STOPPED"
    ui.info(f"  management switch  pid {fabric.mgmt_switch_pid:<8} {switch}")
    healthy = switch == "running"
    topo = fabric.topo
    for switch in topo.switches:
        pid = fabric.ib_switch_pids.get(switch.name, 0)
        state = "running" if ours(pid, fabric.run_dir) else "STOPPED"
        healthy &= state == "running"
        ui.info(f"  {switch.name + ' (IB)':<18} pid {pid:<8} {state}  "
                f"{switch.ports} ports, GUID {switch.guid:016x}")
        answers = {}
        if state == "running":
            try:
                answers = _switch_ports(fabric, switch.name)
            except ui.StepFailed as e:
                ui.info(f"    {e}")
        for port, peer in sorted(_cabled_switch_ports(fabric)[switch.name].items()):
            ui.info(f"    port {port} <-> {peer}: {answers.get(f'port {port}', '?')}")
        for port, address in sorted({**switch.tcp_listen, **switch.tcp_connect}.items()):
            ui.info(f"    port {port} <-> TCP {address}: {answers.get(f'port {port}', '?')}")
        if state == "running":
            try:
                faults = switch_control(fabric, switch.name, "status", timeout=5)
            except ui.StepFailed as e:
                faults, healthy = str(e), False
            if faults != "no faults":
                for line in faults.splitlines():
                    ui.info(f"    fault {line}")
        if state == "running" and queues:
            try:
                for line in switch_control(fabric, switch.name, "queues", timeout=5).splitlines():
                    ui.info(f"    queues of {line}")
            except ui.StepFailed as e:
                ui.info(f"    {e}")
                healthy = False
    for vm in fabric.vms:
        if not ours(vm.pid, fabric.run_dir):
            state = "STOPPED"
        elif qga.ping(vm.qga_sock, timeout=2):
            state = "running, agent answering"
        else:
            state = "running, agent not answering"
        healthy &= state.startswith("running, agent answering")
        cables = ", ".join(f"port {n} to {sw} port {p}" for n, (sw, p) in enumerate(vm.cables, 1))
        ui.info(f"  {vm.name:<18} pid {vm.pid:<8} {state}  node GUID {vm.node_guid:016x}, "
                f"{cables}")
    return 0 if healthy else 1


def sh_in(vm_name: str, script: str, timeout: float = 600) -> qga.Result:
    """Runs `script` with sh in a guest; StepFailed, with its output, when
    it fails."""
    result = exec_in(vm_name, ["sh", "-c", script], timeout=timeout)
    if result.exitcode != 0:
        raise ui.StepFailed(f"{vm_name}: {script}\nexited {result.exitcode}: "
                            f"{(result.out + result.err).strip()}")
    return result


def exec_in(vm_name: str, argv, timeout: float = 600, stdin: bytes = None) -> qga.Result:
    fabric = require()
    vm = fabric.vm(vm_name)
    if not ours(vm.pid, fabric.run_dir):
        raise ui.StepFailed(f"{vm.name} is not running\n--- console ---\n{console_tail(vm)}")
    try:
        return qga.run(vm.qga_sock, argv, timeout=timeout, stdin=stdin)
    except qga.AgentError as e:
        raise ui.StepFailed(f"{vm.name}: {e}\n--- console ---\n{console_tail(vm)}") from e
