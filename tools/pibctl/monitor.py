"""./pib capture, ./pib inspect and ./pib inject: packet capture on switch
and device ports, the device's state and its test facilities, through the
switches' control sockets and the VMs' QMP monitors (x-pib-capture,
x-pib-query, `info pib`, x-pib-inject)."""

import json
import time
from pathlib import Path

from pibctl import fabric as fabric_mod
from pibctl import qmp, ui

POLL_SECONDS = 0.2


def _qmp(vm, name: str, **arguments):
    try:
        return qmp.command(vm.path / "qmp.sock", name, **arguments)
    except qmp.QmpError as e:
        raise ui.StepFailed(f"{vm.name}: {e}") from None


class Target:
    """Where a capture runs: SWITCH:PORT, or vmN[:PORT] (the VM's HCA port,
    1 by default)."""

    def __init__(self, fabric, spec: str):
        name, _, port = spec.partition(":")
        if port and not port.isdigit():
            raise ui.StepFailed(f"expected SWITCH:PORT or vmN[:PORT], got {spec!r}")
        self.fabric = fabric
        self.vm = next((v for v in fabric.vms if v.name == name), None)
        if self.vm is None:
            try:
                fabric.topo.switch(name)
            except KeyError:
                raise ui.StepFailed(f"no VM or switch named {name} in this fabric") from None
            if not port:
                raise ui.StepFailed(f"a switch port is SWITCH:PORT, got {spec!r}")
        self.name = name
        self.port = int(port or 1)

    def start(self, path: Path, count: int) -> str:
        if self.vm:
            args = {"port": self.port, "file": str(path)}
            if count:
                args["count"] = count
            return _qmp(self.vm, "x-pib-capture", **args)["message"]
        return fabric_mod.switch_control(self.fabric, self.name,
                                         f"capture {self.port} {path} {count}")

    def stop(self) -> str:
        if self.vm:
            return _qmp(self.vm, "x-pib-capture", port=self.port)["message"]
        return fabric_mod.switch_control(self.fabric, self.name, f"capture {self.port} stop")

    def finished(self) -> bool:
        """The capture stopped by itself (its packet limit), or is gone."""
        if self.vm:
            port = _qmp(self.vm, "x-pib-query", object=f"port {self.port}")["state"]
            return port.get("capture", {}).get("stopped", True)
        lines = fabric_mod.switch_control(self.fabric, self.name, "captures").splitlines()
        mine = [line for line in lines if line.startswith(f"port {self.port}:")]
        return not mine or "(stopped" in mine[0]


def capture(spec: str, file: str, count: int, seconds: float, mode: str) -> int:
    """Records a port's packets to a pcap file until --seconds pass,
    --count packets were recorded or Ctrl-C; --start and --stop split it."""
    target = Target(fabric_mod.require(), spec)
    path = Path(file or f"{spec.replace(':', '-')}.pcap").resolve()
    if mode == "stop":
        ui.info(target.stop())
        return 0
    ui.info(target.start(path, count))
    if mode == "start":
        return 0
    deadline = time.monotonic() + seconds if seconds else None
    try:
        while not (deadline and time.monotonic() >= deadline):
            time.sleep(POLL_SECONDS)
            if count and target.finished():
                break
    except KeyboardInterrupt:
        pass
    ui.info(target.stop())
    return 0


def inspect(vm_name: str, obj: list, as_json: bool) -> int:
    """Prints a VM's pib-hca state: `info pib` text, or x-pib-query JSON."""
    vm = fabric_mod.require().vm(vm_name)
    what = " ".join(obj)
    if as_json:
        args = {"object": what} if what else {}
        print(json.dumps(_qmp(vm, "x-pib-query", **args)["state"], indent=2))
        return 0
    text = _qmp(vm, "human-monitor-command", **{"command-line": f"info pib {what}".rstrip()})
    print(text, end="")
    # HMP prints errors as text: say so in the exit status too.
    return 1 if text.startswith("Error:") else 0


def inject(vm_name: str, words: list) -> int:
    """Arms a test facility of a VM's pib-hca (docs/prm.md §10)."""
    vm = fabric_mod.require().vm(vm_name)
    ui.info(_qmp(vm, "x-pib-inject", injection=" ".join(words))["message"])
    return 0


def connected_qps(fabric, vm_name: str) -> str:
    """A VM's RC and UC QPs in detail (`info pib qp N`, at most 16): where a
    connection that does not finish stands, for a test's failure report."""
    vm = fabric.vm(vm_name)
    hmp = lambda line: _qmp(vm, "human-monitor-command", **{"command-line": line})
    qps = [line.split()[1] for line in hmp("info pib").splitlines()
           if "type RC" in line or "type UC" in line]
    return f"--- {vm_name}: its RC and UC QPs ---\n" + "".join(
        hmp(f"info pib qp {n}") for n in qps[:16])
