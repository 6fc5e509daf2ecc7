"""examples/libvirt: the domain XML is one libvirt accepts, the switch
starts from the systemd unit's own command line, and the XML's device
arguments cable our QEMU to that switch. Host-only: no guest needed."""

import re
import shlex
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from pibctl import fabric, paths

EXAMPLES = paths.REPO / "examples" / "libvirt"
DOMAIN = EXAMPLES / "pib-guest.xml"
UNIT = EXAMPLES / "pib-fabric-switch@.service"
QEMU_NS = "{http://libvirt.org/schemas/domain/qemu/1.0}"


def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["virt-xml-validate", str(path), "domain"], capture_output=True,
                          text=True, timeout=60)


def test_the_domain_xml_is_valid_for_libvirt(ctx):
    ok = _validate(DOMAIN)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # The validator does reject what libvirt would: an element it lacks.
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.xml"
        bad.write_text(DOMAIN.read_text().replace("<devices>", "<devices><pib-hca/>"))
        refused = _validate(bad)
        assert refused.returncode != 0, refused.stdout


def _unit_command(instance: str, run_dir: Path) -> list:
    """ExecStart of the unit as systemd would run it for `instance`: %i,
    the Environment= defaults, ${VAR} as one word and $VAR split into
    words; /run/pib-fabric and the installed binary moved to the test's."""
    text = UNIT.read_text()
    env = {}
    for line in re.findall(r"^Environment=(.*)$", text, re.M):
        env.update(word.split("=", 1) for word in shlex.split(line))
    exec_start = re.search(r"^ExecStart=(.*)$", text, re.M).group(1).replace("%i", instance)
    argv = []
    for word in shlex.split(exec_start):
        if re.fullmatch(r"\$\w+", word):
            argv += env[word[1:]].split()
            continue
        word = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word)
        argv.append(word.replace("/run/pib-fabric", str(run_dir)))
    assert argv[0] == "/usr/local/bin/pib-fabric-switch", argv
    return [str(paths.fabric_switch_binary()), *argv[1:]]


def _control(path: Path, command: str) -> str:
    return fabric.control_answer(path, command)


def _port1(instance: Path) -> str:
    """What the switch says of its port 1: `port 1: DOWN, link up`."""
    found = re.search(r"^(?:ok )?(port 1: .*)$", _control(instance / "control.sock", "ports"), re.M)
    return found.group(1) if found else ""


def _wait_for(what, condition, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _device_args(run_dir: Path) -> list:
    """The domain's qemu:commandline, its socket path moved to run_dir."""
    args = [a.get("value") for a in ET.parse(DOMAIN).getroot().iter(f"{QEMU_NS}arg")]
    assert args[0::2] == ["-chardev", "-device"], args
    return [a.replace("/run/pib-fabric", str(run_dir)) for a in args]


def test_the_unit_starts_a_switch_the_domain_s_device_cables_to(ctx):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        instance = run_dir / "fabric0"
        instance.mkdir()  # systemd's RuntimeDirectory=
        switch = subprocess.Popen(_unit_command("fabric0", run_dir), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
        qemu = None
        try:
            _wait_for("the switch's sockets", lambda: (instance / "control.sock").exists())
            assert sorted(p.name for p in instance.glob("port*.sock")) == sorted(
                f"port{n}.sock" for n in range(1, 9))
            before = _port1(instance)
            assert before.startswith("port 1: ") and "link up" not in before, before
            # libvirt would give the root port of index 9 the id pci.9.
            qemu = subprocess.Popen(
                [str(paths.qemu_binary()), *paths.QEMU_FIRMWARE_ARGS, "-machine", "q35",
                 "-accel", "tcg", "-nodefaults", "-display", "none", "-S",
                 "-device", "pcie-root-port,id=pci.9,chassis=9", *_device_args(run_dir)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            _wait_for("the cable", lambda: "link up" in _port1(instance), timeout=60)
            assert qemu.poll() is None, qemu.stdout.read()
            print(f"switch port 1: {before}, then with the domain's device: {_port1(instance)}")
        finally:
            for proc in (qemu, switch):
                if proc is not None:
                    proc.terminate()
                    proc.wait(timeout=30)
        out = switch.stdout.read()
        assert switch.returncode in (0, -15), out
        assert "pib-fabric-switch fabric0" in switch.args
