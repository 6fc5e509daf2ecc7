"""qtest's random accesses (mmio_fuzz.py) to a pib-hca with
personality=mlx5: the initialization segment, command slots in guest RAM
with mailbox chains that are right, wrong or point into the device's own
BARs, the UAR pages' doorbells, MSI-X and configuration space. The
function is brought up first (ENABLE_HCA, INIT_HCA, ALLOC_UAR, an EQ that
takes command completions), so that what needs one is reached too."""

import random
import time

from pibctl import mmio_fuzz
from pibctl.mmio_fuzz import BAR0, BAR4, RAM, Qtest

DOORBELL_PAGES = 16
ISEG_SIZE = 0x2010
FIRST_UAR = 3
QUEUE = RAM  # the command queue's page
MAILBOXES = RAM + 0x1000  # 16 blocks of 1 KiB per slot from here
EQ_RING = RAM + 0xC0000  # after the mailboxes
CQ_RING = RAM + 0xC1000
CQ_RECORD = RAM + 0xC2000
OPCODES = [0x100, 0x101, 0x102, 0x103, 0x104, 0x105, 0x107, 0x108, 0x109, 0x10a, 0x10b,
           0x200, 0x202, 0x301, 0x302, 0x400, 0x401, 0x50d, 0x700, 0x701, 0x702, 0x703,
           0x762, 0x800, 0x801, 0x802, 0x803, 0x805, 0x80e, 0x80f, 0x7777]


def _be32(value: int) -> int:
    """What a writel of the driver's big-endian dword `value` sends."""
    return int.from_bytes((value & 0xFFFFFFFF).to_bytes(4, "big"), "little")


def _write_bytes(q, addr: int, data: bytes) -> None:
    q.send(f"write {addr:#x} {len(data)} 0x{data.hex()}")


def _iseg_write(q, offset: int, value: int) -> None:
    q.send(f"writel {BAR0 + offset:#x} {_be32(value):#x}")


def _slot(q, rng, slot: int, opcode: int, op_mod: int, body: bytes, out_len: int) -> None:
    """A command in `slot`: its input's first 16 bytes inline, the rest in
    a chain of mailboxes (sometimes broken, sometimes in a BAR), then the
    doorbell."""
    header = opcode.to_bytes(2, "big") + bytes(4) + op_mod.to_bytes(2, "big") + bytes(8)
    data = header + body
    rest, blocks = data[16:], []
    for n in range((max(len(rest), out_len - 16) + 511) // 512):
        block = MAILBOXES + 0x400 * (slot * 16 + n % 16)
        blocks.append(block)
    for i, block in enumerate(blocks):
        nxt = blocks[i + 1] if i + 1 < len(blocks) else 0
        if rng.random() < 0.05:
            nxt = rng.choice([BAR0, BAR4, rng.getrandbits(64) & ~7])
        number = i if rng.random() > 0.05 else rng.getrandbits(32)
        _write_bytes(q, block, rest[512 * i:512 * (i + 1)].ljust(512, b"\0")
                     + bytes(0x30) + nxt.to_bytes(8, "big") + number.to_bytes(4, "big") + bytes(4))
    first = blocks[0] if blocks else 0
    layout = (bytes([7, 0, 0, 0]) + len(data).to_bytes(4, "big") + first.to_bytes(8, "big")
              + data[:16].ljust(16, b"\0") + bytes(16) + first.to_bytes(8, "big")
              + out_len.to_bytes(4, "big") + bytes([0, 0, 0, 1]))
    if rng.random() < 0.05:
        layout = bytes(rng.getrandbits(8) for _ in range(64))
    _write_bytes(q, QUEUE + 64 * slot, layout)
    _iseg_write(q, 0x18, 1 << slot)


def _bring_up(q, rng) -> None:
    _iseg_write(q, 0x10, 0)
    _iseg_write(q, 0x14, QUEUE)
    _slot(q, rng, 0, 0x104, 0, b"", 16)  # ENABLE_HCA
    _slot(q, rng, 0, 0x102, 0, b"", 16)  # INIT_HCA
    _slot(q, rng, 0, 0x802, 0, b"", 16)  # ALLOC_UAR: page 3
    eqc = bytearray(0x100)
    eqc[0x0c] = 4  # log_eq_size 4: 16 EQEs
    eqc[0x0d:0x10] = FIRST_UAR.to_bytes(3, "big")
    eqc[0x48:0x50] = (1 << 0x0a).to_bytes(8, "big")  # command completions
    eqc[0x100:0x108] = EQ_RING.to_bytes(8, "big")
    _slot(q, rng, 0, 0x301, 0, bytes(eqc), 16)
    q.send(f"writel {BAR0 + FIRST_UAR * 0x1000 + 0x40:#x} {_be32(0):#x}")  # arm EQ 0
    cqc = bytearray(0x100)
    cqc[0x0c] = 4  # log_cq_size 4: 16 CQEs
    cqc[0x0d:0x10] = FIRST_UAR.to_bytes(3, "big")
    cqc[0x14:0x18] = (0).to_bytes(4, "big")  # c_eqn: EQ 0
    cqc[0x38:0x40] = CQ_RECORD.to_bytes(8, "big")
    cqc[0x100:0x108] = CQ_RING.to_bytes(8, "big")
    _slot(q, rng, 0, 0x400, 0, bytes(cqc), 16)


def _command(q, rng) -> None:
    opcode = rng.choice(OPCODES)
    length = rng.choice([0, 8, 0x100, 0x1000])
    body = bytes(rng.choice([0, 0xFF, rng.getrandbits(8)]) for _ in range(length))
    _slot(q, rng, rng.randrange(32), opcode, rng.randrange(8), body,
          rng.choice([16, 0x70, 0x110, 0x1010, rng.randrange(0, 0x2000)]))


def _uar(q, rng) -> None:
    page = FIRST_UAR + rng.randrange(DOORBELL_PAGES)
    offset = rng.choice([0x40, 0x48, 0x20, 0x800, rng.randrange(0x1000)])
    size = rng.choice([4, 4, 8, 1])
    op = {1: "b", 4: "l", 8: "q"}[size]
    value = rng.randrange(4) << 24 | rng.randrange(64) if size == 4 else rng.getrandbits(8 * size)
    if size == 4:
        value = _be32(value)
    elif size == 8 and rng.random() < 0.5:  # a CQ arm: command and counter, then the CQ
        value = _be32(rng.randrange(3) << 24 | rng.randrange(4)) | _be32(rng.randrange(3)) << 32
    q.send(f"write{op} {BAR0 + page * 0x1000 + offset:#x} {value:#x}")


def _access(q, rng) -> None:
    r = rng.random()
    if r < 0.25:
        _command(q, rng)
    elif r < 0.45:
        _uar(q, rng)
    elif r < 0.60:  # the initialization segment, any width
        size = rng.choice([1, 2, 4, 8])
        op = {1: "b", 2: "w", 4: "l", 8: "q"}[size]
        offset = rng.randrange(0, ISEG_SIZE)
        if rng.random() < 0.5:
            q.send(f"read{op} {BAR0 + offset:#x}")
        else:
            q.send(f"write{op} {BAR0 + offset:#x} {rng.getrandbits(8 * size):#x}")
    elif r < 0.65:
        q.send(f"writel {BAR4 + rng.randrange(0, 0x1000, 4):#x} {rng.getrandbits(32):#x}")
    elif r < 0.85:
        mmio_fuzz.random_ram(q, rng)
    elif r < 0.88:
        q.send(f"clock_step {rng.choice([1000, 1000000, 100000000])}")
    elif r < 0.90:
        mmio_fuzz.random_config(q, rng)
    elif r < 0.91:  # the queue's address moved, or put back
        _iseg_write(q, 0x14, QUEUE if rng.random() < 0.8 else rng.getrandbits(32))
    else:
        _bring_up(q, rng)


def run(accesses: int, seed: int = 1, minutes: float = 0):
    """As mmio_fuzz.run, for the ConnectX personality."""
    rng = random.Random(seed)
    q = Qtest(f"personality=mlx5,doorbell-pages={DOORBELL_PAGES}")
    start = time.monotonic()
    try:
        assert q.query(f"outl 0xcf8 {mmio_fuzz.CFG:#x}") == 0
        assert q.query("inl 0xcfc") == 0x101715B3, "no ConnectX pib-hca at the expected slot"
        mmio_fuzz.place_bars(q)
        _bring_up(q, rng)
        while q.sent < accesses:
            if minutes and time.monotonic() - start > minutes * 60:
                break
            _access(q, rng)
        q.flush()
        # Still alive and answering: the command interface revision reads 5.
        mmio_fuzz.place_bars(q)
        assert q.query(f"readl {BAR0 + 4:#x}") & 0xFFFF == 0x0500, "cmdif_rev is not 5"
    finally:
        stderr = q.close()
    mmio_fuzz.check_stderr(stderr)
    return q.sent, time.monotonic() - start, q.guest_errors()
