"""A guest program (test_connectx_verbs.py runs it on mlx5_0): DEVX's
event and command channels, as rdma-core's mlx5dv_devx_* offer them,
over objects one process makes with DEVX commands alone (docs/mlx5.md
§16.4).

It makes a PD, a CQ and an RC QP by DEVX commands, the CQ's and QP's rings
and doorbell records in one UMEM, and takes the QP to RTS connected to
itself. Two event channels subscribe to the CQ's completion event, one
with the event's data and one without; the CQ is armed and a NOP posted.
Each channel must deliver its cookie, the first with the EQE naming the
CQ, and the CQ must hold the NOP's completion. Then QUERY_CQ and QUERY_QP
go through an asynchronous command channel, and their answers must say
what the CQ and QP are. Every wait is bounded; the first check that
fails ends the program with its reason."""

import ctypes
import mmap
import os
import select
import struct
import sys

import pyverbs.dma_util as dma

verbs = ctypes.CDLL("libibverbs.so.1", use_errno=True)
dv = ctypes.CDLL("libmlx5.so.1", use_errno=True)
P = ctypes.c_void_p
for name, res, args in [
        ("ibv_get_device_list", P, [P]), ("ibv_get_device_name", ctypes.c_char_p, [P]),
        ("ibv_close_device", ctypes.c_int, [P])]:
    getattr(verbs, name).restype, getattr(verbs, name).argtypes = res, args
for name, res, args in [
        ("mlx5dv_open_device", P, [P, P]),
        ("mlx5dv_devx_general_cmd", ctypes.c_int, [P, P, ctypes.c_size_t, P, ctypes.c_size_t]),
        ("mlx5dv_devx_obj_create", P, [P, P, ctypes.c_size_t, P, ctypes.c_size_t]),
        ("mlx5dv_devx_obj_modify", ctypes.c_int, [P, P, ctypes.c_size_t, P, ctypes.c_size_t]),
        ("mlx5dv_devx_obj_destroy", ctypes.c_int, [P]),
        ("mlx5dv_devx_umem_reg", P, [P, P, ctypes.c_size_t, ctypes.c_uint32]),
        ("mlx5dv_devx_umem_dereg", ctypes.c_int, [P]),
        ("mlx5dv_devx_alloc_uar", P, [P, ctypes.c_uint32]),
        ("mlx5dv_devx_free_uar", None, [P]),
        ("mlx5dv_devx_query_eqn", ctypes.c_int, [P, ctypes.c_uint32, P]),
        ("mlx5dv_devx_create_event_channel", P, [P, ctypes.c_int]),
        ("mlx5dv_devx_destroy_event_channel", None, [P]),
        ("mlx5dv_devx_subscribe_devx_event", ctypes.c_int,
         [P, P, ctypes.c_uint16, P, ctypes.c_uint64]),
        ("mlx5dv_devx_get_event", ctypes.c_ssize_t, [P, P, ctypes.c_size_t]),
        ("mlx5dv_devx_create_cmd_comp", P, [P]),
        ("mlx5dv_devx_destroy_cmd_comp", None, [P]),
        ("mlx5dv_devx_obj_query_async", ctypes.c_int,
         [P, P, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_uint64, P]),
        ("mlx5dv_devx_get_async_cmd_comp", ctypes.c_int, [P, P, ctypes.c_size_t])]:
    getattr(dv, name).restype, getattr(dv, name).argtypes = res, args


class Uar(ctypes.Structure):  # struct mlx5dv_devx_uar
    _fields_ = [("reg_addr", P), ("base_addr", P), ("page_id", ctypes.c_uint32),
                ("mmap_off", ctypes.c_long), ("comp_mask", ctypes.c_uint64)]


class Handle(ctypes.Structure):  # mlx5dv_devx_umem, _event_channel, _cmd_comp: one int
    _fields_ = [("value", ctypes.c_int)]


def fail(why):
    print(f"FAIL: {why}", flush=True)
    sys.exit(1)


def errno_text():
    return os.strerror(ctypes.get_errno())


# Commands as mlx5_ifc.h lays them out: big-endian fields by bit offset.
def put(buf, bit, width, value):
    if width == 64:
        struct.pack_into(">Q", buf, bit // 8, value)
        return
    word = bit // 32
    shift = 32 - width - bit % 32
    mask = ((1 << width) - 1) << shift
    old = struct.unpack_from(">I", buf, word * 4)[0]
    struct.pack_into(">I", buf, word * 4, (old & ~mask) | ((value << shift) & mask))


def take(buf, bit, width):
    word = struct.unpack_from(">I", buf, (bit // 32) * 4)[0]
    return (word >> (32 - width - bit % 32)) & ((1 << width) - 1)


def command(opcode, size, fields=()):
    """A command's input: its opcode, then each (bit, width, value)."""
    buf = bytearray(size)
    put(buf, 0, 16, opcode)
    for bit, width, value in fields:
        put(buf, bit, width, value)
    return buf


def doorbell(address, data):
    """One 64-bit write of `data`'s 8 bytes as they are (pyverbs' helper
    stores its value's bytes in host order)."""
    dma.mmio_write64_as_be(address, int.from_bytes(data, "little"))


def cbuf(data):
    return (ctypes.c_char * len(data)).from_buffer(data)


CQC, QPC = 0x80, 0xc0  # the contexts in create_cq_in and the QP commands
ADS = QPC + 0x0  # primary_address_path
LOG_CQ, LOG_SQ, LOG_RQ = 3, 3, 3
CQE_BYTES, RWQE_BYTES = 64, 16
PAGE = 4096
# One UMEM: the CQ's ring, the QP's receive then send ring, the two
# doorbell records (the CQ's, then the QP's).
CQ_AT, QP_AT, DBR_AT = 0, PAGE, 2 * PAGE
CQ_DBR, QP_DBR = DBR_AT, DBR_AT + 64
UMEM_BYTES = 3 * PAGE


def main():
    count = ctypes.c_int()
    devices = verbs.ibv_get_device_list(ctypes.byref(count))
    device = next((ctypes.cast(devices, ctypes.POINTER(P))[i] for i in range(count.value)
                   if verbs.ibv_get_device_name(ctypes.cast(devices, ctypes.POINTER(P))[i])
                   == b"mlx5_0"), None)
    if not device:
        fail("no mlx5_0")
    attr = struct.pack("<IIQ", 1, 0, 0)  # MLX5DV_CONTEXT_FLAGS_DEVX
    ctx = dv.mlx5dv_open_device(device, ctypes.create_string_buffer(attr, len(attr)))
    if not ctx:
        fail(f"mlx5dv_open_device with DEVX: {errno_text()}")

    def general(cmd, outlen):
        out = bytearray(outlen)
        if dv.mlx5dv_devx_general_cmd(ctx, cbuf(cmd), len(cmd), cbuf(out), outlen):
            fail(f"command 0x{take(cmd, 0, 16):x}: {errno_text()}, status "
                 f"0x{out[0]:x} syndrome 0x{take(out, 0x20, 32):x}")
        return out

    def create(cmd, outlen, what):
        out = bytearray(outlen)
        obj = dv.mlx5dv_devx_obj_create(ctx, cbuf(cmd), len(cmd), cbuf(out), outlen)
        if not obj:
            fail(f"{what}: {errno_text()}, status 0x{out[0]:x} syndrome "
                 f"0x{take(out, 0x20, 32):x}")
        return obj, out

    def modify(obj, cmd, what):
        out = bytearray(16)
        if dv.mlx5dv_devx_obj_modify(obj, cbuf(cmd), len(cmd), cbuf(out), len(out)):
            fail(f"{what}: {errno_text()}, status 0x{out[0]:x} syndrome "
                 f"0x{take(out, 0x20, 32):x}")

    # The port's LID (QUERY_HCA_VPORT_CONTEXT, hca_vport_context.lid).
    vport = general(command(0x762, 16), 0x210)
    lid = take(vport, 0x80 + 0x300, 16)

    pd, out = create(command(0x800, 16), 16, "ALLOC_PD")
    pdn = take(out, 0x48, 24)
    eqn = ctypes.c_uint32()
    if dv.mlx5dv_devx_query_eqn(ctx, 0, ctypes.byref(eqn)):
        fail(f"mlx5dv_devx_query_eqn: {errno_text()}")
    uar_p = dv.mlx5dv_devx_alloc_uar(ctx, 1)  # MLX5DV_UAR_ALLOC_TYPE_NC
    if not uar_p:
        fail(f"mlx5dv_devx_alloc_uar: {errno_text()}")
    uar = ctypes.cast(uar_p, ctypes.POINTER(Uar)).contents

    ring = mmap.mmap(-1, UMEM_BYTES)
    ring_addr = ctypes.addressof(ctypes.c_char.from_buffer(ring))
    for i in range(1 << LOG_CQ):  # every CQE invalid, owned by software
        ring[CQ_AT + i * CQE_BYTES + 63] = 0xf1
    umem_p = dv.mlx5dv_devx_umem_reg(ctx, ring_addr, UMEM_BYTES, 1)  # IBV_ACCESS_LOCAL_WRITE
    if not umem_p:
        fail(f"mlx5dv_devx_umem_reg: {errno_text()}")
    umem = ctypes.cast(umem_p, ctypes.POINTER(Handle)).contents.value

    def in_umem(valid, ident, offset, at):
        """The fields that put a ring or record at byte `at` of the UMEM."""
        return [(valid, 1, 1), (ident, 32, umem), (offset, 64, at)]

    cq, out = create(command(0x400, 0x110, [
        (CQC + 0x63, 5, LOG_CQ),
        (CQC + 0x68, 24, uar.page_id),
        (CQC + 0xa0, 32, eqn.value),
        # dbr_umem_valid, dbr_umem_id, dbr_addr; cq_umem_valid, _id, _offset
        *in_umem(CQC + 0x6, CQC + 0x20, CQC + 0x1c0, CQ_DBR),
        *in_umem(0x2e0, 0x2c0, 0x280, CQ_AT)]), 16, "CREATE_CQ")
    cqn = take(out, 0x48, 24)

    qp, out = create(command(0x500, 0x110, [
        (QPC + 0x8, 8, 0),  # st RC
        (QPC + 0x13, 2, 3),  # pm_state migrated
        (QPC + 0x28, 24, pdn),
        (QPC + 0x49, 4, LOG_RQ),
        (QPC + 0x4d, 3, 0),  # 16-byte receive WQEs
        (QPC + 0x51, 4, LOG_SQ),
        (QPC + 0x58, 2, 1),  # ts_format: the default
        (QPC + 0x68, 24, uar.page_id),
        (QPC + 0x3e8, 24, cqn),  # cqn_snd
        (QPC + 0x4e8, 24, cqn),  # cqn_rcv
        # dbr_umem_valid, dbr_umem_id, dbr_addr; wq_umem_valid, _id, _offset
        *in_umem(QPC + 0x683, QPC + 0x720, QPC + 0x500, QP_DBR),
        *in_umem(0x860, 0x840, 0x800, QP_AT)]), 16, "CREATE_QP")
    qpn = take(out, 0x48, 24)

    def change(opcode, what, fields):
        modify(qp, command(opcode, 0x110, [(0x48, 24, qpn), (QPC + ADS + 0x128, 8, 1)] +
                           [(QPC + bit, width, value) for bit, width, value in fields]), what)

    change(0x502, "RST2INIT_QP", [])
    change(0x503, "INIT2RTR_QP", [(0x40, 3, 3), (0x43, 5, 20), (0xa8, 24, qpn),
                                  (ADS + 0x30, 16, lid), (0x4a3, 5, 12)])
    change(0x504, "RTR2RTS_QP", [(0x38d, 3, 7), (0x390, 3, 7), (ADS + 0x40, 5, 14)])

    # Two event channels on the CQ's completion event (type 0): one with
    # the EQE, one without.
    channels = {}
    for flags, cookie in ((0, 0x1234), (1, 0x5678)):  # MLX5DV_DEVX_..._OMIT_EV_DATA
        channel = dv.mlx5dv_devx_create_event_channel(ctx, flags)
        if not channel:
            fail(f"mlx5dv_devx_create_event_channel({flags}): {errno_text()}")
        events = (ctypes.c_uint16 * 1)(0)
        if dv.mlx5dv_devx_subscribe_devx_event(channel, cq, ctypes.sizeof(events), events,
                                               cookie):
            fail(f"mlx5dv_devx_subscribe_devx_event: {errno_text()}")
        channels[cookie] = channel

    # Arm the CQ for the next completion (its record's arm word, then the
    # UAR's CQ doorbell), post a NOP and ring the send doorbell.
    arm = (1 << 28) | 0  # sn 1, any completion, consumer index 0
    struct.pack_into(">I", ring, CQ_DBR + 4, arm)
    doorbell(uar.base_addr + 0x20, struct.pack(">II", arm, cqn))
    nop = struct.pack(">IIBBBBI", 0 << 8 | 0x00, qpn << 8 | 1, 0, 0, 0, 0x08, 0)
    send_at = QP_AT + (RWQE_BYTES << LOG_RQ)
    ring[send_at:send_at + len(nop)] = nop
    struct.pack_into(">I", ring, QP_DBR + 4, 1)
    doorbell(uar.reg_addr, nop[:8])

    for cookie, channel in channels.items():
        fd = ctypes.cast(channel, ctypes.POINTER(Handle)).contents.value
        if not select.select([fd], [], [], 20)[0]:
            fail(f"no completion event on the channel of cookie 0x{cookie:x} in 20 s")
        data = bytearray(8 + 64)
        got = dv.mlx5dv_devx_get_event(channel, cbuf(data), len(data))
        if got < 8 or struct.unpack_from("<Q", data)[0] != cookie:
            fail(f"channel of cookie 0x{cookie:x}: read {got} bytes, {data[:8].hex()}")
        if cookie == 0x1234:
            eqe = data[8:]
            if got != 8 + 64 or eqe[1] != 0 or take(eqe, 0x38 * 8 + 8, 24) != cqn:
                fail(f"the completion event's EQE is not CQ {cqn}'s: {eqe.hex()}")
            print(f"event channel: completion event of CQ {cqn} with its EQE", flush=True)
        else:
            if got != 8:
                fail(f"a channel without event data read {got} bytes")
            print("event channel without data: the cookie alone", flush=True)

    cqe = ring[CQ_AT:CQ_AT + CQE_BYTES]
    opcode, owner = cqe[63] >> 4, cqe[63] & 1
    if opcode != 0 or owner != 0 or struct.unpack_from(">H", cqe, 60)[0] != 0 or \
            take(cqe, 56 * 8 + 8, 24) != qpn:
        fail(f"CQE of the NOP: {bytes(cqe).hex()}")
    print(f"CQ {cqn}: the NOP's completion, QP {qpn}, WQE 0", flush=True)

    # QUERY_CQ and QUERY_QP through an asynchronous command channel.
    comp = dv.mlx5dv_devx_create_cmd_comp(ctx)
    if not comp:
        fail(f"mlx5dv_devx_create_cmd_comp: {errno_text()}")
    queries = {0x11: (cq, 0x402, cqn, 0x110), 0x22: (qp, 0x50b, qpn, 0x100)}  # QUERY_CQ, _QP
    for wr_id, (obj, opcode, number, outlen) in queries.items():
        cmd = command(opcode, 16, [(0x48, 24, number)])
        if dv.mlx5dv_devx_obj_query_async(obj, cbuf(cmd), len(cmd), outlen, wr_id, comp):
            fail(f"mlx5dv_devx_obj_query_async(0x{opcode:x}): {errno_text()}")
    fd = ctypes.cast(comp, ctypes.POINTER(Handle)).contents.value
    answers = {}
    while len(answers) < len(queries):
        if not select.select([fd], [], [], 20)[0]:
            fail(f"{len(queries) - len(answers)} asynchronous queries unanswered in 20 s")
        resp = bytearray(8 + 0x110)
        if dv.mlx5dv_devx_get_async_cmd_comp(comp, cbuf(resp), len(resp)):
            fail(f"mlx5dv_devx_get_async_cmd_comp: {errno_text()}")
        answers[struct.unpack_from("<Q", resp)[0]] = resp[8:]
    cq_out, qp_out = answers.get(0x11), answers.get(0x22)
    if cq_out is None or qp_out is None:
        fail(f"answers for wr_ids {sorted(answers)}")
    if cq_out[0] or take(cq_out, CQC + 0x63, 5) != LOG_CQ or take(cq_out, CQC + 0xa0, 32) != eqn.value:
        fail(f"QUERY_CQ answered {bytes(cq_out[:0x50]).hex()}")
    if qp_out[0] or take(qp_out, QPC, 4) != 3 or take(qp_out, QPC + 0x28, 24) != pdn:
        fail(f"QUERY_QP answered {bytes(qp_out[:0x50]).hex()}")
    print(f"command channel: QUERY_CQ (2^{LOG_CQ} CQEs on EQ {eqn.value}) and QUERY_QP "
          f"(RTS, PD {pdn}) answered", flush=True)

    dv.mlx5dv_devx_destroy_cmd_comp(comp)
    for channel in channels.values():
        dv.mlx5dv_devx_destroy_event_channel(channel)
    for obj in (qp, cq):
        if dv.mlx5dv_devx_obj_destroy(obj):
            fail(f"mlx5dv_devx_obj_destroy: {errno_text()}")
    if dv.mlx5dv_devx_umem_dereg(umem_p) or dv.mlx5dv_devx_obj_destroy(pd):
        fail(f"UMEM or PD: {errno_text()}")
    dv.mlx5dv_devx_free_uar(uar_p)
    verbs.ibv_close_device(ctx)
    print("PASS", flush=True)


main()
