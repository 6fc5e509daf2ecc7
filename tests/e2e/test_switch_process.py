"""The fabric switch as a process: sockets, framing, its agents, bad input."""

import shutil
import socket
import struct
import subprocess
import time

import iba
from pibctl import paths

SWITCH = paths.core_build_dir() / "fabric-switch" / "pib-fabric-switch"
GUID = 0x0250494253570099


class SwitchProcess:
    def __init__(self, tmp, ports=4, guid=GUID, extra=()):
        self.dir = tmp
        self.proc = subprocess.Popen(
            [str(SWITCH), "--ports", str(ports), "--socket-dir", str(tmp), "--guid", hex(guid),
             "--name", "e2e switch", *extra], stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 10
        while not (tmp / f"port{ports}.sock").exists():
            assert time.monotonic() < deadline, "switch did not create its sockets"
            assert self.proc.poll() is None, self.proc.stderr.read()
            time.sleep(0.05)

    def connect(self, port):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(str(self.dir / f"port{port}.sock"))
        kind, _ = iba.read_frame(s)  # the switch says HELLO first
        assert kind == iba.HELLO
        s.sendall(iba.hello(0x1111, 1))
        return s

    def stop(self):
        """Stops the switch; returns its exit status and what it logged."""
        self.proc.terminate()
        _, err = self.proc.communicate(timeout=10)
        self.log = err
        return self.proc.returncode


def _node_info(sock, *path):
    sock.sendall(iba.frame(iba.PACKET, iba.dr_smp(0x01, 0x0011, 0, list(path))))
    kind, payload = iba.read_frame(sock)
    assert kind == iba.PACKET
    _, _, dest_qp, _, mad = iba.parse_ud(payload)
    return dest_qp, mad


def _tmpdir(name):
    """A fresh directory: stale sockets must not look like a live switch."""
    d = paths.cache_dir() / "test-tmp" / name
    if d.exists():
        shutil.rmtree(d)
    d.mkdir(parents=True)
    return d


def test_switch_answers_smps_over_its_sockets(ctx):
    sw = SwitchProcess(_tmpdir("switch-smp"))
    try:
        s = sw.connect(2)
        dest_qp, mad = _node_info(s, 2)
        assert mad[3] == 0x81, mad[:8]                       # GetResp
        assert struct.unpack(">Q", mad[64 + 12:64 + 20])[0] == GUID
        assert mad[64 + 2] == 2 and mad[64 + 3] == 4         # a 4-port switch
        assert mad[64 + 36] == 2                             # asked through port 2
    finally:
        assert sw.stop() == 0, sw.log


def test_switch_survives_garbage_and_reconnects(ctx):
    sw = SwitchProcess(_tmpdir("switch-garbage"))
    try:
        s = sw.connect(1)
        s.sendall(b"this is not a pib frame at all" * 10)
        s.settimeout(5)
        assert s.recv(100) == b"", "the switch should drop a garbled link"
        s.close()
        # A corrupt packet inside a valid frame is dropped, the link stays.
        s = sw.connect(1)
        bad = bytearray(iba.dr_smp(0x01, 0x0011, 0, [1]))
        bad[40] ^= 0xFF
        s.sendall(iba.frame(iba.PACKET, bytes(bad)))
        _, mad = _node_info(s, 1)
        assert struct.unpack(">Q", mad[64 + 12:64 + 20])[0] == GUID
        assert sw.proc.poll() is None
    finally:
        assert sw.stop() == 0, sw.log
    assert "port 1: link down (bad magic)" in sw.log, sw.log


def _free_tcp_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_switches_on_other_hosts_link_over_tcp(ctx):
    """Switch B dials switch A's TCP port 3; a directed route crosses the
    TCP link to B and comes back."""
    tcp = f"127.0.0.1:{_free_tcp_port()}"
    a = SwitchProcess(_tmpdir("switch-tcp-a"), extra=["--tcp", f"3={tcp}"])
    b = SwitchProcess(_tmpdir("switch-tcp-b"), guid=GUID + 1,
                      extra=["--connect-tcp", f"3={tcp}"])
    try:
        s = a.connect(1)
        s.settimeout(2)
        deadline = time.monotonic() + 15
        while True:  # B retries its connection every second
            try:
                _, mad = _node_info(s, 1, 3)
                break
            except socket.timeout:
                assert time.monotonic() < deadline, "no answer across the TCP link"
        assert struct.unpack(">Q", mad[64 + 12:64 + 20])[0] == GUID + 1
        assert mad[64 + 36] == 3                             # B was reached by its port 3
        assert a.proc.poll() is None and b.proc.poll() is None
    finally:
        assert b.stop() == 0, b.log
        assert a.stop() == 0, a.log


def test_a_second_hello_retrains_the_link_at_most_every_100_ms(ctx):
    """A peer that reset its port says HELLO again (docs/wire.md): the switch
    answers with its own and takes the link down and up; one that does so
    again within 100 ms gets the HELLO without the bounce."""
    sw = SwitchProcess(_tmpdir("switch-retrain"))
    try:
        s = sw.connect(3)
        _node_info(s, 3)  # the link is up: SMPs pass
        for _ in range(3):  # one retrain, then two too soon
            s.sendall(iba.hello(0x1111, 1))
            kind, _ = iba.read_frame(s)
            assert kind == iba.HELLO
        dest_qp, mad = _node_info(s, 3)  # up again
        assert mad[3] == 0x81, mad[:8]
    finally:
        assert sw.stop() == 0, sw.log
    assert sw.log.count("port 3: the peer retrains the link") == 1, sw.log
    assert sw.log.count("port 3: link up") == 2, sw.log
