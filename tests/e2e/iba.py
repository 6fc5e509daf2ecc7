"""Minimal IBA packet and pib wire framing for host-side tests
(docs/wire.md): enough to act as a port peer of the fabric switch."""

import struct
import zlib

WIRE_MAGIC = 0x57424950
HELLO, PACKET = 1, 2
PERMISSIVE = 0xFFFF


def _crc16(data: bytes) -> int:
    crc = 0xFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0xD008 if crc & 1 else crc >> 1
    return ~crc & 0xFFFF


def _icrc(packet: bytes) -> int:
    masked = bytearray(packet)
    masked[0:8] = b"\xff" * 8          # LRH (no GRH in these packets)
    masked[8 + 4] = 0xFF               # BTH resv8a
    return zlib.crc32(bytes(masked)) & 0xFFFFFFFF


def crcs_ok(packet: bytes):
    """(ICRC right, VCRC right) of a whole packet, LRH to VCRC, with or
    without a GRH (IBA 7.8: the ICRC sees the LRH, the GRH's traffic class,
    flow label and hop limit, and the BTH's reserved byte as ones)."""
    body, vcrc = packet[:-2], struct.unpack("<H", packet[-2:])[0]
    vcrc_ok = vcrc == _crc16(body)
    if len(body) < 8 + 12 + 4 or (body[1] & 3) not in (2, 3):
        return False, vcrc_ok  # raw packets have no ICRC
    masked = bytearray(body[:-4])
    masked[0:8] = b"\xff" * 8
    bth = 8
    if body[1] & 3 == 3:  # a GRH
        masked[8] |= 0x0F
        masked[9:12] = b"\xff" * 3
        masked[15] = 0xFF
        bth = 48
    masked[bth + 4] = 0xFF
    icrc = struct.unpack("<I", body[-4:])[0]
    return icrc == zlib.crc32(bytes(masked)) & 0xFFFFFFFF, vcrc_ok


ERF_HEADER = 16
ERF_TYPE_INFINIBAND = 21
LINKTYPE_ERF = 197


def read_pcap(path):
    """(link type, [packet bytes], [sent?]) of a classic pcap file of ERF
    records (docs/user-guide.md, "Packet capture"): each record's ERF header
    is checked and stripped; its interface says the direction."""
    data = open(path, "rb").read()
    magic = struct.unpack("<I", data[:4])[0]
    endian = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    packets, sent, at = [], [], 24
    while at + 16 <= len(data):
        caplen = struct.unpack(endian + "I", data[at + 8:at + 12])[0]
        record = data[at + 16:at + 16 + caplen]
        at += 16 + caplen
        assert record[8] == ERF_TYPE_INFINIBAND, f"ERF type {record[8]}"
        rlen, _, wlen = struct.unpack(">HHH", record[10:16])
        assert rlen == len(record) and wlen == len(record) - ERF_HEADER, (rlen, wlen, len(record))
        packets.append(record[ERF_HEADER:])
        sent.append(record[9] & 3 == 1)
    return linktype, packets, sent


def ud_packet(dlid, slid, dest_qp, src_qp, qkey, payload: bytes, vl=0) -> bytes:
    pad = (4 - len(payload) % 4) % 4
    words = (8 + 12 + 8 + len(payload) + pad + 4) // 4
    lrh = struct.pack(">BBHHH", vl << 4, 2, dlid, words, slid)
    bth = struct.pack(">BBHII", 0x64, pad << 4, 0xFFFF, dest_qp & 0xFFFFFF, 0)
    deth = struct.pack(">II", qkey, src_qp & 0xFFFFFF)
    body = lrh + bth + deth + payload + b"\0" * pad
    body += struct.pack("<I", _icrc(body))
    return body + struct.pack("<H", _crc16(body))


def parse_ud(packet: bytes):
    """(dlid, slid, dest_qp, src_qp, payload) of a UD packet, CRCs checked."""
    body, vcrc = packet[:-2], struct.unpack("<H", packet[-2:])[0]
    assert vcrc == _crc16(body), "bad VCRC"
    assert struct.unpack("<I", body[-4:])[0] == _icrc(body[:-4]), "bad ICRC"
    _, _, dlid, _, slid = struct.unpack(">BBHHH", body[:8])
    pad = (body[9] >> 4) & 3
    dest_qp = struct.unpack(">I", body[12:16])[0] & 0xFFFFFF
    src_qp = struct.unpack(">I", body[24:28])[0] & 0xFFFFFF
    return dlid, slid, dest_qp, src_qp, body[28:len(body) - 4 - pad]


def dr_smp(method, attr, modifier, path, tid=0x42) -> bytes:
    """A directed-route SMP as the SM's HCA sends it (hop pointer 1)."""
    mad = bytearray(256)
    struct.pack_into(">BBBBHBBQHHI", mad, 0, 1, 0x81, 1, method, 0, 1, len(path), tid, attr,
                     0, modifier)
    struct.pack_into(">HH", mad, 32, PERMISSIVE, PERMISSIVE)
    for i, port in enumerate(path):
        mad[129 + i] = port
    return ud_packet(PERMISSIVE, PERMISSIVE, 0, 0, 0, bytes(mad), vl=15)


def frame(kind: int, payload: bytes) -> bytes:
    return struct.pack("<IBBHII", WIRE_MAGIC, 1, kind, 0, len(payload), 0) + payload


def hello(guid: int, port: int) -> bytes:
    return frame(HELLO, struct.pack("<QQBBHI", guid, guid, 1, port, 0, 0))


def read_frame(sock):
    """(type, payload) of the next frame from a blocking socket."""
    def exactly(n):
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise EOFError("connection closed")
            data += chunk
        return data
    magic, version, kind, _, length, _ = struct.unpack("<IBBHII", exactly(16))
    assert magic == WIRE_MAGIC and version == 1
    return kind, exactly(length)
