"""Client of a VM's QMP monitor (the UNIX socket fabric.py gives each VM):
one command, its answer."""

import json
import socket
from pathlib import Path


class QmpError(Exception):
    pass


def command(sock_path: Path, name: str, /, timeout: float = 10.0, **arguments):
    """Runs QMP command `name` with `arguments`; returns its "return" value.
    Raises QmpError with QEMU's description when the command fails."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(sock_path))
        except OSError as e:
            raise QmpError(f"cannot connect to {sock_path}: {e}") from e
        stream = sock.makefile("rwb")
        _answer(stream)  # the greeting
        for request in ({"execute": "qmp_capabilities"},
                        {"execute": name, "arguments": arguments}):
            stream.write(json.dumps(request).encode() + b"\n")
            stream.flush()
            reply = _answer(stream)
        return reply.get("return")


def _answer(stream) -> dict:
    """The next reply or greeting; asynchronous events in between are skipped."""
    while True:
        line = stream.readline()
        if not line:
            raise QmpError("QMP closed the connection")
        message = json.loads(line)
        if "error" in message:
            raise QmpError(f"{message['error'].get('class')}: {message['error'].get('desc')}")
        if "event" not in message:
            return message
