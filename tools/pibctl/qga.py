"""Client of qemu-guest-agent over the VM's virtio-serial UNIX socket: runs
commands in a guest and returns their output and exit status."""

import base64
import fcntl
import json
import os
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path


class AgentError(Exception):
    pass


class AgentGone(AgentError):
    """The connection to the agent broke or could not be made: the QEMU
    went away, which a VM that moves to a new QEMU does (./pib fabric
    migrate gives the new one the same socket path)."""


@dataclass
class Result:
    exitcode: int
    stdout: bytes
    stderr: bytes
    signal: int = 0

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    @property
    def err(self) -> str:
        return self.stderr.decode(errors="replace")


class Agent:
    """One connection to a guest agent. The chardev accepts one client at a
    time, so a lock file serialises users across processes: hold one for
    a request or a few, not for a command's run (run() below)."""

    def __init__(self, sock_path: Path, timeout: float = 10.0):
        self.sock_path = Path(sock_path)
        self.timeout = timeout
        self._sock = None
        self._lock = open(self.sock_path.with_suffix(".lock"), "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        # Whatever fails from here lets the lock go: an exception kept by
        # a caller (its traceback holds this object) must not hold it.
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.settimeout(timeout)
            try:
                self._sock.connect(str(self.sock_path))
            except OSError as e:
                raise AgentGone(f"cannot connect to {self.sock_path}: {e}") from e
            self._buf = b""
            self._sync()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if getattr(self, "_sock", None):
            self._sock.close()
            self._sock = None
        if self._lock:
            self._lock.close()
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _send(self, command: str, arguments=None) -> None:
        msg = {"execute": command}
        if arguments is not None:
            msg["arguments"] = arguments
        try:
            self._sock.sendall(json.dumps(msg).encode() + b"\n")
        except socket.timeout as e:
            raise AgentError("guest agent took no request in time") from e
        except OSError as e:
            raise AgentGone(f"the guest agent's connection broke: {e}") from e

    def _recv(self, deadline: float):
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line, self._buf = self._buf[:nl], self._buf[nl + 1 :]
                # guest-sync-delimited prefixes its answer with 0xff.
                line = line.lstrip(b"\xff").strip()
                if not line:
                    continue
                try:
                    reply = json.loads(line)
                except ValueError:
                    continue
                if isinstance(reply, dict):  # not a stray value an earlier client left
                    return reply
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentError("guest agent did not answer in time")
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except socket.timeout as e:
                raise AgentError("guest agent did not answer in time") from e
            except OSError as e:
                raise AgentGone(f"the guest agent's connection broke: {e}") from e
            if not chunk:
                raise AgentGone("guest agent closed the connection")
            self._buf += chunk

    def _sync(self) -> None:
        """Discards whatever an earlier client left unread."""
        token = random.randrange(1, 1 << 31)
        self._send("guest-sync-delimited", {"id": token})
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._recv(deadline)
            if reply.get("return") == token:
                return

    def call(self, command: str, arguments=None, timeout=None):
        self._send(command, arguments)
        reply = self._recv(time.monotonic() + (timeout or self.timeout))
        if "error" in reply:
            raise AgentError(f"{command}: {reply['error'].get('desc', reply['error'])}")
        return reply.get("return")



# A command is watched on the connection that started it for this long,
# looked at every few milliseconds: most commands a test runs (cat, echo,
# the diags) end within it, and a connection costs some 40 ms to open
# (its sync waits on the guest). Longer ones release the agent, so that
# other commands in the guest run beside them.
HOLD_S = 0.5
HELD_POLL_S = (0.005, 0.05)  # first and longest pause between looks, held
# The same once the agent is released. Half the longest pause is what a
# command that ran long loses on average before it is seen to end: at 0.5
# s, the reload loops and the register pokes lost seconds a test.
FREE_POLL_S = (0.05, 0.2)
# How long a command's status may be out of reach because its VM moves to
# a new QEMU (./pib fabric migrate): the guest agent moves with the guest,
# its commands with it, and the new QEMU answers on the same socket.
MOVE_GRACE_S = 120


def _exited(agent: Agent, pid: int):
    """The command's Result if it has ended, else None."""
    status = agent.call("guest-exec-status", {"pid": pid})
    if not status.get("exited"):
        return None
    return Result(
        exitcode=status.get("exitcode", -1),
        stdout=base64.b64decode(status.get("out-data", "")),
        stderr=base64.b64decode(status.get("err-data", "")),
        signal=status.get("signal", 0),
    )


def run(sock_path: Path, argv, timeout: float = 60.0, stdin: bytes = None,
        request_timeout: float = 30.0) -> Result:
    """Runs argv in the guest, killing it after `timeout` seconds. The
    agent is held for the start and at most HOLD_S after it, then only
    for each look at the status: commands in one guest run side by side,
    as over ssh."""
    wrapped = ["timeout", "-k", "5", str(int(max(1, timeout))), *argv]
    args = {"path": wrapped[0], "arg": wrapped[1:], "capture-output": True}
    if stdin is not None:
        args["input-data"] = base64.b64encode(stdin).decode()
    with Agent(sock_path, timeout=request_timeout) as agent:
        try:
            pid = agent.call("guest-exec", args)["pid"]
        except AgentGone as e:
            raise AgentGone(f"{e}; the VM may be moving, and {' '.join(argv)} may or may not "
                            "have started: run it again once the move is done") from e
        try:
            held_until = time.monotonic() + HOLD_S
            delay, longest = HELD_POLL_S
            while time.monotonic() < held_until:
                time.sleep(delay)
                delay = min(delay * 1.5, longest)
                result = _exited(agent, pid)
                if result:
                    return result
        except AgentGone:
            pass  # the VM moves: its status is asked of the new QEMU below
    return _wait_for_exit(sock_path, argv, pid, timeout, request_timeout)


def _wait_for_exit(sock_path: Path, argv, pid: int, timeout: float,
                   request_timeout: float) -> Result:
    """Looks at command `pid`'s status until it ends, a connection a look.
    A look that finds the agent gone or silent (the VM moves) waits for the
    new QEMU, up to MOVE_GRACE_S."""
    deadline = time.monotonic() + timeout + 15
    delay, longest = FREE_POLL_S
    gone_since = None
    while True:
        try:
            with Agent(sock_path, timeout=request_timeout) as agent:
                result = _exited(agent, pid)
            gone_since = None
        except AgentError as e:  # gone, or not answering while its VM stops to move
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since > MOVE_GRACE_S:
                raise AgentGone(f"{e}; the guest agent has been out of reach for "
                                f"{MOVE_GRACE_S} s while {' '.join(argv)} ran") from e
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AgentError(f"{' '.join(argv)} still running after {timeout:.0f} s")
        time.sleep(delay)
        delay = min(delay * 1.5, longest)


def ping(sock_path: Path, timeout: float = 3.0) -> bool:
    if not os.path.exists(sock_path):
        return False
    try:
        with Agent(sock_path, timeout=timeout) as agent:
            agent.call("guest-ping")
        return True
    except (AgentError, OSError):
        return False


def start(sock_path: Path, argv, request_timeout: float = 30.0) -> int:
    """Starts argv in the guest without capturing its output (it writes
    where argv says); returns its pid for status()."""
    with Agent(sock_path, timeout=request_timeout) as agent:
        return agent.call("guest-exec", {"path": argv[0], "arg": list(argv[1:])})["pid"]


def status(sock_path: Path, pid: int, request_timeout: float = 30.0):
    """The Result of command `pid` (started by start()) once it ended, else
    None. Its stdout and stderr are empty: start() did not capture them."""
    with Agent(sock_path, timeout=request_timeout) as agent:
        return _exited(agent, pid)


# What a GuestFile reads at most per request, and per read().
READ_CHUNK = 64 * 1024
READ_MOST = 16 * READ_CHUNK


class GuestFile:
    """A file in the guest, read as it grows (a command's output that is
    shown as it comes). The agent keeps the file open between
    connections: each read() connects, takes what is new, and lets go."""

    def __init__(self, sock_path: Path, path: str, request_timeout: float = 30.0):
        self.sock_path = sock_path
        self.request_timeout = request_timeout
        with Agent(sock_path, timeout=request_timeout) as agent:
            self.handle = agent.call("guest-file-open", {"path": path, "mode": "r"})

    def read(self) -> bytes:
        """What the file gained since the last read, up to READ_MOST."""
        data = b""
        with Agent(self.sock_path, timeout=self.request_timeout) as agent:
            while len(data) < READ_MOST:
                got = agent.call("guest-file-read", {"handle": self.handle, "count": READ_CHUNK})
                data += base64.b64decode(got.get("buf-b64", ""))
                if got.get("count", 0) < READ_CHUNK:
                    break
        return data

    def close(self) -> None:
        try:
            with Agent(self.sock_path, timeout=self.request_timeout) as agent:
                agent.call("guest-file-close", {"handle": self.handle})
        except AgentError:
            pass  # the guest went: so did its handle
