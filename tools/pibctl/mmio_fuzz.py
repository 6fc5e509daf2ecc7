"""Random register, doorbell, MSI-X and configuration-space accesses to
the built qemu-system-x86_64's pib-hca, through QEMU's qtest protocol (no
guest): the device's BARs are placed, bus mastering is on, and then come
random accesses of every width, commands whose mailboxes, rings and MTT
entries point into guest RAM or into the device's own BARs, random guest
RAM contents and virtual time. QEMU must neither crash nor hang: it
answers every access, and a last read at the end."""

import random
import subprocess
import tempfile
import time

from pibctl import paths

SLOT = 4                      # pcie.0 device number of the pib-hca
CFG = 0x80000000 | SLOT << 11  # configuration address of function 0
BAR0, BAR2, BAR4 = 0xE0000000, 0xE1000000, 0xE2000000
REGS_SIZE, DOORBELL_PAGES = 0x1000, 16
RAM, RAM_SIZE = 0x100000, 1 << 20  # the part of guest RAM the commands use
OPCODES = [0x0001, 0x0002, 0x0003, 0x0004, 0x0005, 0x0006, 0x0007, 0x0008, 0x0009,
           0x0010, 0x0011, 0x0012, 0x0013, 0x0014, 0x0015, 0x0016, 0x0020, 0x0021,
           0x0022, 0x0028, 0x0029, 0x002A, 0x0030, 0x0031, 0x0032, 0x0038, 0x0039,
           0x003A, 0x003B, 0x0040, 0x0041, 0x0042, 0x0043, 0x0048, 0x0049, 0x7777]


class Qtest:
    """qemu-system-x86_64 under -qtest stdio, with pipelined commands."""

    def __init__(self, properties: str = f"doorbell-pages={DOORBELL_PAGES}"):
        # qtest would log every access: to /dev/null; QEMU's own stderr to a
        # file, which nothing has to keep reading.
        self.log = tempfile.TemporaryFile(mode="w+")
        cmd = [str(paths.qemu_binary()), "-machine", "q35", "-nodefaults", "-display", "none",
               "-accel", "qtest", "-qtest", "stdio", "-qtest-log", "/dev/null", "-m", "256",
               "-d", "guest_errors",
               "-L", "/usr/share/seabios", "-L", "/usr/share/qemu",
               "-device", f"pib-hca,bus=pcie.0,addr={SLOT:#x},{properties}"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1 << 20)
        self.pending = []
        self.sent = 0

    def send(self, line: str) -> None:
        self.pending.append(line)
        if len(self.pending) >= 200:
            self.flush()

    def flush(self) -> None:
        """Sends what is queued and reads one answer for each."""
        if not self.pending:
            return
        self.proc.stdin.write("\n".join(self.pending) + "\n")
        self.proc.stdin.flush()
        for line in self.pending:
            answer = self.proc.stdout.readline()
            if not answer.startswith("OK"):
                raise RuntimeError(f"QEMU answered {answer!r} to {line!r} "
                                   f"(exit {self.proc.poll()})\n{self._stderr()}")
        self.sent += len(self.pending)
        self.pending = []

    def query(self, line: str) -> int:
        self.flush()
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] != "OK":
            raise RuntimeError(f"QEMU answered {answer!r} to {line!r}\n{self._stderr()}")
        self.sent += 1
        return int(answer[1], 16) if len(answer) > 1 else 0

    def guest_errors(self) -> dict:
        """How often the device reported each guest-error token."""
        self.log.seek(0)
        counts = {}
        for line in self.log:
            if line.startswith("pib-hca"):
                token = line.split(":")[1].strip() if ":" in line else "?"
                counts[token] = counts.get(token, 0) + 1
        return counts

    def _stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self) -> str:
        """Stops QEMU (qtest keeps it running after its input ends)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self._stderr()


def _cfg_write(q, offset, value, size=4):
    q.send(f"outl 0xcf8 {CFG | (offset & 0xFC):#x}")
    port = 0xCFC + (offset & 3)
    q.send({1: f"outb {port:#x} {value & 0xFF:#x}", 2: f"outw {port:#x} {value & 0xFFFF:#x}",
            4: f"outl {port:#x} {value & 0xFFFFFFFF:#x}"}[size])


def place_bars(q):
    for bar, base in ((0, BAR0), (2, BAR2), (4, BAR4)):
        _cfg_write(q, 0x10 + 4 * bar, base)
        _cfg_write(q, 0x14 + 4 * bar, 0)
    _cfg_write(q, 0x04, 0x0006, 2)  # memory space and bus master


def _address(rng):
    """An address a mailbox, ring or MTT entry names: guest RAM mostly, the
    device's own BARs sometimes, anything at all now and then."""
    r = rng.random()
    if r < 0.15:
        return rng.choice([BAR0, BAR2, BAR4]) + rng.randrange(0, 0x1000, 8)
    if r < 0.2:
        return rng.getrandbits(64) & ~7
    return RAM + rng.randrange(0, RAM_SIZE - 0x1000, 8)


def _command(q, rng):
    regs = {0x100: _address(rng), 0x108: _address(rng)}
    for offset, value in regs.items():
        q.send(f"writel {BAR0 + offset:#x} {value & 0xFFFFFFFF:#x}")
        q.send(f"writel {BAR0 + offset + 4:#x} {value >> 32:#x}")
    q.send(f"writel {BAR0 + 0x110:#x} {rng.choice([0, 1, 2, rng.getrandbits(32)]):#x}")
    ctrl = rng.choice(OPCODES) | rng.getrandbits(8) << 16 | 1 << 31
    if rng.random() < 0.2:
        ctrl |= 1 << 30
    q.send(f"writel {BAR0 + 0x120:#x} {ctrl:#x}")


def random_ram(q, rng):
    """Random guest RAM: mailboxes, rings and WQEs the device reads."""
    addr = RAM + rng.randrange(0, RAM_SIZE - 256, 8)
    words = [rng.choice([0, 1, 2, 6, 12, 64, 0x1000, rng.getrandbits(32), _address(rng) & 0xFFFFFFFF])
             for _ in range(rng.randrange(1, 32))]
    data = "".join(f"{w & 0xFFFFFFFF:08x}" for w in words)
    q.send(f"write {addr:#x} {len(data) // 2} 0x{data}")


def random_config(q, rng):
    """Configuration space, rarely, and the BARs put back."""
    offset = rng.randrange(0, 0x100)
    _cfg_write(q, offset, rng.getrandbits(32), rng.choice([1, 2, 4]))
    if rng.random() < 0.5:
        place_bars(q)


def _access(q, rng):
    r = rng.random()
    size = rng.choice([1, 2, 4, 8])
    op = {1: "b", 2: "w", 4: "l", 8: "q"}[size]
    value = rng.getrandbits(8 * size)
    if r < 0.30:
        base, span = BAR0, REGS_SIZE + 0x100
    elif r < 0.55:
        base, span = BAR2, DOORBELL_PAGES * 0x1000
    elif r < 0.60:
        base, span = BAR4, 0x1000
    elif r < 0.70:
        _command(q, rng)
        return
    elif r < 0.85:
        random_ram(q, rng)
        return
    elif r < 0.88:
        q.send(f"clock_step {rng.choice([1000, 1000000, 100000000])}")
        return
    elif r < 0.90:
        random_config(q, rng)
        return
    elif r < 0.91:
        q.send(f"writel {BAR0 + 0x10:#x} 0x52534554")  # reset
        return
    else:
        base, span = BAR0, REGS_SIZE
    offset = rng.randrange(0, span)
    if rng.random() < 0.5:
        q.send(f"write{op} {base + offset:#x} {value:#x}")
    else:
        q.send(f"read{op} {base + offset:#x}")


def run(accesses: int, seed: int = 1, minutes: float = 0):
    """Runs until `accesses` accesses (or `minutes`, if given) have been
    answered. Returns (accesses made, seconds, guest errors by token)."""
    rng = random.Random(seed)
    q = Qtest()
    start = time.monotonic()
    try:
        assert q.query(f"outl 0xcf8 {CFG:#x}") == 0
        assert q.query("inl 0xcfc") == 0x1B1B1234, "no pib-hca at the expected slot"
        place_bars(q)
        q.send(f"writel {BAR0 + 0x120:#x} {0x0003 | 1 << 31:#x}")  # INIT_HCA first, mostly
        while q.sent < accesses:
            if minutes and time.monotonic() - start > minutes * 60:
                break
            _access(q, rng)
        q.flush()
        # Still alive and answering: the node GUID register reads back.
        place_bars(q)
        q.query(f"readl {BAR0 + 0x20:#x}")
    finally:
        stderr = q.close()
    check_stderr(stderr)
    return q.sent, time.monotonic() - start, q.guest_errors()


def check_stderr(stderr: str) -> None:
    for bad in ("Assertion", "core dumped", "Segmentation", "AddressSanitizer"):
        if bad in stderr:
            raise RuntimeError(f"QEMU reported {bad}:\n{stderr[-3000:]}")
