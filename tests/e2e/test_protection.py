"""Memory protection between two guests, with the MRs the provider
registers from user memory (MTT-backed, at an unaligned address): vm1's
RDMA WRITE, READ and atomics aim at a region of vm2's memory with keys
that are wrong in each way IBA 10.6 names. Each bad access must complete
on vm1 with IBV_WC_REM_ACCESS_ERR (the responder's NAK: remote access
error) and change no byte of vm2's buffer, inside the region or around
it; each good one must land exactly where it was aimed. vm2 keeps a copy
of what its buffer must hold and compares it after every case (all of
it, or 4 MiB around the region in a 1 GiB page). The cases run three
times: on 4 KiB pages, on a 2 MiB huge page and on a 1 GiB one, which the
driver maps with MTT pages of that size (its debugfs says so)."""

from pibctl.pairs import run_pair

PORT = 18860

# Runs as "protect.py server PORT" in vm2 and "protect.py client PORT HOST"
# in vm1; they talk over TCP, a JSON line at a time.
SCRIPT = r"""
import ctypes, json, mmap, os, socket, struct, sys
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, SendWR
import pyverbs.enums as e

# vm2's buffer, the part of it compared after each case, and the region
# in it: (bytes mapped, mmap flags, first byte compared, bytes compared,
# the region's first byte, its length), offsets from the buffer's start.
# The region is unaligned and spans pages. The kernel picks the largest
# MTT page size that the region's first and last byte are not in the
# same half of (ib_umem_find_best_pgsz): in the 2 MiB huge page the region
# is most of the page, in the 1 GiB one it straddles the page's middle;
# there only 4 MiB around it are compared, which holds every case's aim.
MAP_HUGETLB = 0x40000
MAP_HUGE_1GB = 30 << 26
PRIVATE = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
GEOMETRY = {
    "4k": (4 * 4096, PRIVATE, 0, 4 * 4096, 4096 + 104, 8000),
    "2m": (2 << 20, PRIVATE | MAP_HUGETLB, 0, 2 << 20, 4096 + 104, (2 << 20) - 3 * 4096),
    "1g": (1 << 30, PRIVATE | MAP_HUGETLB | MAP_HUGE_1GB, (510 << 20), 4 << 20,
           (512 << 20) - 4096 + 104, 3 * 4096 - 200),
}
LOCAL = e.IBV_ACCESS_LOCAL_WRITE
READ, WRITE, ATOMIC = (e.IBV_ACCESS_REMOTE_READ, e.IBV_ACCESS_REMOTE_WRITE,
                       e.IBV_ACCESS_REMOTE_ATOMIC)

# name: (operation, key, offset from the region's start, length, succeeds)
def cases(LENGTH):
    return [
        ("write at the region's first byte", "write", "all", 0, 64, True),
        ("write ending at its last byte", "write", "all", LENGTH - 64, 64, True),
        ("write starting one byte below it", "write", "all", -1, 64, False),
        ("write ending one byte past it", "write", "all", LENGTH - 63, 64, False),
        ("write far past it", "write", "all", LENGTH + 4096, 8, False),
        ("read of the whole region", "read", "all", 0, LENGTH, True),
        ("read starting one byte below it", "read", "all", -1, 8, False),
        ("read ending one byte past it", "read", "all", LENGTH - 7, 8, False),
        ("fetch-and-add at its last word", "fadd", "all", LENGTH - 8, 8, True),
        ("compare-and-swap past it", "cas", "all", LENGTH, 8, False),
        ("write with a key lacking REMOTE_WRITE", "write", "read-only", 0, 64, False),
        ("read with a key lacking REMOTE_READ", "read", "write-only", 0, 64, False),
        ("atomic with a key lacking REMOTE_ATOMIC", "fadd", "no-atomic", 0, 8, False),
        ("write with the key of another PD's MR", "write", "other-pd", 0, 64, False),
        ("write with a deregistered MR's key", "write", "deregistered", 0, 64, False),
        ("write with a live MR's key, variant changed", "write", "stale-variant", 0, 64, False),
        ("write with the old key of a re-registered MR", "write", "reused", 0, 64, False),
    ]


def lines(sock):
    f = sock.makefile("rw")
    def send(obj):
        f.write(json.dumps(obj) + "\n")
        f.flush()
    def recv():
        line = f.readline()
        if not line:
            raise SystemExit("the peer closed the connection")
        return json.loads(line)
    return send, recv


def connect(qp, port_attr, peer):
    attr = QPAttr(port_num=1)
    attr.qp_access_flags = LOCAL | READ | WRITE | ATOMIC
    attr.path_mtu = port_attr.active_mtu
    attr.dest_qp_num = peer["qpn"]
    attr.rq_psn = peer["psn"]
    attr.sq_psn = 0x123
    attr.max_dest_rd_atomic = 4
    attr.max_rd_atomic = 4
    attr.min_rnr_timer = 12
    attr.timeout = 14
    attr.retry_cnt = 3
    attr.rnr_retry = 3
    attr.ah_attr = AHAttr(dlid=peer["lid"], port_num=1)
    qp.to_rts(attr)


def new_qp(pd, cq):
    return QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq,
                             cap=QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1,
                                       max_recv_sge=1)))


# The size of the MTT pages the driver gave the MR at `iova`.
def debugfs_page_size(iova):
    with open("/sys/kernel/debug/pib/pib_0/mr") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            if int(fields[3], 16) == iova:
                return 1 << int(fields[6])
    return None


def server(port, pages):
    ctx = Context(name="pib_0")
    port_attr = ctx.query_port(1)
    pd, other_pd = PD(ctx), PD(ctx)
    cq = CQ(ctx, 16)
    # The buffer: 4 KiB pages, one 2 MiB or one 1 GiB huge page. `shadow`
    # holds what its compared part must hold; START is the region's
    # offset in that part.
    SIZE, FLAGS, FROM, COMPARED, REGION, LENGTH = GEOMETRY[pages]
    START = REGION - FROM
    whole = mmap.mmap(-1, SIZE, flags=FLAGS)
    shadow = bytearray(os.urandom(COMPARED))
    whole[FROM:FROM + COMPARED] = bytes(shadow)
    base = ctypes.addressof(ctypes.c_char.from_buffer(whole)) + REGION

    def region(access, in_pd=pd):
        return MR(in_pd, LENGTH, LOCAL | access, address=base)

    page_size = None
    listener = socket.create_server(("", port))
    sock, _ = listener.accept()
    send, recv = lines(sock)
    send({"length": LENGTH})
    while True:
        ask = recv()
        if ask.get("done"):
            break
        keep = []  # MRs that must live through the case
        kind = ask["key"]
        if kind == "all":
            keep.append(region(READ | WRITE | ATOMIC))
            rkey = keep[-1].rkey
        elif kind == "read-only":
            keep.append(region(READ))
            rkey = keep[-1].rkey
        elif kind == "write-only":
            keep.append(region(WRITE))
            rkey = keep[-1].rkey
        elif kind == "no-atomic":
            keep.append(region(READ | WRITE))
            rkey = keep[-1].rkey
        elif kind == "other-pd":
            keep.append(region(READ | WRITE | ATOMIC, other_pd))
            rkey = keep[-1].rkey
        elif kind == "deregistered":
            gone = region(READ | WRITE | ATOMIC)
            rkey = gone.rkey
            gone.close()
        elif kind == "stale-variant":
            keep.append(region(READ | WRITE | ATOMIC))
            rkey = keep[-1].rkey ^ 0x5a
        elif kind == "reused":
            old = region(READ | WRITE | ATOMIC)
            rkey = old.rkey
            old.close()
            keep.append(region(READ | WRITE | ATOMIC))
            ask["reused_index"] = keep[-1].rkey >> 8 == rkey >> 8
        if kind == "all" and page_size is None:
            page_size = debugfs_page_size(base)
            print(f"{pages} buffer: the region's MR has MTT pages of {page_size} bytes")
        qp = new_qp(pd, cq)
        send({"qpn": qp.qp_num, "psn": 0x123, "lid": port_attr.lid, "addr": base,
              "rkey": rkey, "reused_index": ask.get("reused_index")})
        connect(qp, port_attr, recv())
        send({"ready": True})
        result = recv()
        offset = START + result["offset"]
        reply = {"expect": None, "before": None}
        if result["ok"] and result["op"] == "write":
            shadow[offset:offset + result["length"]] = bytes.fromhex(result["data"])
        elif result["ok"] and result["op"] == "read":
            reply["expect"] = bytes(shadow[offset:offset + result["length"]]).hex()
        elif result["ok"] and result["op"] == "fadd":
            reply["before"], = struct.unpack_from("<Q", shadow, offset)
            struct.pack_into("<Q", shadow, offset, (reply["before"] + result["add"]) % 2**64)
        now = bytes(whole[FROM:FROM + COMPARED])
        diff = [] if now == shadow else [i for i in range(COMPARED) if now[i] != shadow[i]]
        reply.update(changed=len(diff), first=diff[0] - START if diff else None)
        send(reply)
        qp.close()
        for mr in keep:
            mr.close()
        shadow[:] = now  # a difference is reported once, not again
    print("server done")


def client(port, host):
    ctx = Context(name="pib_0")
    port_attr = ctx.query_port(1)
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    send, recv = lines(socket.create_connection((host, port)))
    LENGTH = recv()["length"]
    local = MR(pd, LENGTH + 8192, LOCAL)
    failures = 0
    for name, op, key, offset, length, good in cases(LENGTH):
        send({"key": key})
        peer = recv()
        qp = new_qp(pd, cq)
        send({"qpn": qp.qp_num, "psn": 0x123, "lid": port_attr.lid})
        connect(qp, port_attr, peer)
        recv()  # ready
        data = os.urandom(length)
        local.write(data, length, 0)
        wr = SendWR(wr_id=1, num_sge=1, sg=[SGE(local.buf, length, local.lkey)],
                    send_flags=e.IBV_SEND_SIGNALED)
        add = 0x0102030405060708
        if op == "write":
            wr.opcode = e.IBV_WR_RDMA_WRITE
            wr.set_wr_rdma(peer["rkey"], peer["addr"] + offset)
        elif op == "read":
            wr.opcode = e.IBV_WR_RDMA_READ
            wr.set_wr_rdma(peer["rkey"], peer["addr"] + offset)
        elif op == "fadd":
            wr.opcode = e.IBV_WR_ATOMIC_FETCH_AND_ADD
            wr.set_wr_atomic(peer["rkey"], peer["addr"] + offset, add, 0)
        else:
            wr.opcode = e.IBV_WR_ATOMIC_CMP_AND_SWP
            wr.set_wr_atomic(peer["rkey"], peer["addr"] + offset, 0, 1)
        qp.post_send(wr)
        polled = []
        while not polled:
            n, wcs = cq.poll()
            polled = wcs[:n]
        status = polled[0].status
        ok = status == e.IBV_WC_SUCCESS
        send({"ok": ok, "op": op, "offset": offset, "length": length,
              "data": data.hex() if op == "write" else "", "add": add})
        verdict = recv()
        problems = []
        if ok != good:
            problems.append("succeeded" if ok else "failed")
        if not good and status != e.IBV_WC_REM_ACCESS_ERR:
            problems.append(f"status {status}, not REM_ACCESS_ERR ({e.IBV_WC_REM_ACCESS_ERR})")
        if verdict["changed"]:
            problems.append(f"{verdict['changed']} bytes of vm2's buffer changed unasked, "
                            f"the first at region offset {verdict['first']}")
        if ok and op == "read" and local.read(length, 0).hex() != verdict["expect"]:
            problems.append("the data read differs from vm2's")
        if ok and op == "fadd" and struct.unpack("<Q", local.read(8, 0))[0] != verdict["before"]:
            problems.append("fetch-and-add returned another value than was there")
        note = " (the key's index was reused)" if peer.get("reused_index") else ""
        print(f"{'FAIL' if problems else 'ok  '} {name}: status {status}{note}"
              + (": " + "; ".join(problems) if problems else ""))
        failures += bool(problems)
        qp.close()
    send({"done": True})
    print(f"{len(cases(LENGTH))} cases, {failures} failed")
    sys.exit(1 if failures else 0)


if sys.argv[1] == "server":
    server(int(sys.argv[2]), sys.argv[3])
else:
    client(int(sys.argv[2]), sys.argv[3])
"""


def _run(ctx, pages, port):
    """Runs every case against vm2's buffer in `pages` pages; returns the
    server's output."""
    result, server_out, rc = run_pair(
        ctx, ["python3", "/tmp/protect.py", "server", str(port), pages],
        ["python3", "/tmp/protect.py", "client", str(port)], port=port, timeout=300)
    print(server_out.strip())
    print(result.out.rstrip())
    assert result.exitcode == 0 and rc == "0", \
        f"client {result.exitcode}, server {rc}\n{result.out}{result.err}\nserver:\n{server_out}"
    assert "17 cases, 0 failed" in result.out, result.out
    return server_out


def test_bad_keys_are_refused_and_touch_no_byte(ctx):
    for vm in ("vm1", "vm2"):
        ctx.run(vm, ["bash", "-c", "cat > /tmp/protect.py"], stdin=SCRIPT.encode())
    _run(ctx, "4k", PORT)


def test_bad_keys_are_refused_on_a_huge_page_too(ctx):
    """The same with vm2's buffer in a 2 MiB huge page, which the driver
    maps with one 2 MiB MTT entry: the device's bounds checks must not
    take the page for the region."""
    ctx.sh("vm2", "echo 4 >/proc/sys/vm/nr_hugepages")
    free = ctx.sh("vm2", "awk '/HugePages_Free/ {print $2}' /proc/meminfo").out.strip()
    assert int(free) >= 1, f"vm2 could not reserve a 2 MiB page: HugePages_Free {free}"
    try:
        out = _run(ctx, "2m", PORT + 1)
    finally:
        ctx.sh("vm2", "echo 0 >/proc/sys/vm/nr_hugepages")
    assert "MTT pages of 2097152 bytes" in out, out


GIGANTIC_FREE = "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages"


def test_bad_keys_are_refused_on_a_1_gib_page_too(ctx):
    """The same in a 1 GiB huge page, the largest page the device offers
    (page_size_cap): the driver maps the region with one 1 GiB MTT entry,
    and a wrong bound would let an access reach anywhere in that GiB. Test
    guests reserve the page at boot (e2e_pass.TEST_KERNEL_ARGS)."""
    free = ctx.run("vm2", ["cat", GIGANTIC_FREE], check=False).out.strip()
    assert free == "1", f"vm2 has no free 1 GiB page (free_hugepages {free!r}): booted without " \
                        "hugepagesz=1G hugepages=1?"
    out = _run(ctx, "1g", PORT + 2)
    assert "MTT pages of 1073741824 bytes" in out, out
