"""./pib console VM: the guest's serial console on this terminal."""

import os
import select
import socket
import sys
import termios
import tty

from pibctl import fabric, ui

ESCAPE = b"\x1d"  # Ctrl-]
QUIET_SECONDS = 3  # with piped input: how long to wait for more output


def attach(vm_name: str) -> int:
    vm = fabric.require().vm(vm_name)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(vm.console_sock))
    except OSError as e:
        raise ui.StepFailed(f"cannot reach the console of {vm.name}: {e}") from e
    stdin = sys.stdin.fileno()
    interactive = os.isatty(stdin)
    ui.info(f"console of {vm.name}; Ctrl-] to leave" if interactive else f"console of {vm.name}")
    saved = termios.tcgetattr(stdin) if interactive else None
    inputs = [sock, stdin]
    try:
        if interactive:
            tty.setraw(stdin)
        sock.sendall(b"\n")
        while True:
            # After piped input ends, show output until the guest is quiet.
            ready, _, _ = select.select(inputs, [], [], None if stdin in inputs else QUIET_SECONDS)
            if not ready:
                break
            if sock in ready:
                data = sock.recv(4096)
                if not data:
                    break
                os.write(sys.stdout.fileno(), data)
            if stdin in ready:
                data = os.read(stdin, 1024)
                if interactive and (not data or ESCAPE in data):
                    break
                if not data:
                    inputs.remove(stdin)
                    continue
                sock.sendall(data)
    finally:
        if saved is not None:
            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
        sock.close()
    print()
    return 0
