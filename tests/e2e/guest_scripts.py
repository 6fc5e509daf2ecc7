"""Programs the end-to-end tests run inside guests."""

# Creates one object of each kind through the provider, prints debugfs while
# they exist, destroys them and prints debugfs again.
OBJECTS_SCRIPT = r"""
import pyverbs.enums as e
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.cq import CQ
from pyverbs.srq import SRQ, SrqInitAttr, SrqAttr
from pyverbs.qp import QP, QPInitAttr, QPCap, QPAttr

def dump(tag):
    for name in ("pd", "mr", "cq", "qp", "srq"):
        with open(f"/sys/kernel/debug/pib/pib_0/{name}") as f:
            print(f"{tag} {name} {len(f.read().splitlines()) - 1}")

ctx = Context(name="pib_0")
pd = PD(ctx)
mr = MR(pd, 65536, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE)
cq = CQ(ctx, 64)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=32, max_sge=2)))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(16, 16, 2, 2)))
qp.to_init(QPAttr(port_num=1))
print("lkey", hex(mr.lkey), "qpn", qp.qp_num, "state", qp.qp_state)
dump("live")
for obj in (qp, srq, cq, mr, pd):
    obj.close()
dump("gone")
ctx.close()
"""

# A TCP sink: accepts one connection on the port given, reads until the
# peer closes, prints the byte count and SHA-256 of what arrived.
TCP_SINK_SCRIPT = r"""
import hashlib, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(sys.argv[1])))
s.listen(1)
c, _ = s.accept()
h, n = hashlib.sha256(), 0
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    h.update(b)
    n += len(b)
print(n, h.hexdigest())
"""

# The matching source (arguments FILE PORT HOST): sends the file, prints its byte count,
# SHA-256 and MB/s (from the first byte sent until the sink has closed,
# that is has read everything).
TCP_SOURCE_SCRIPT = r"""
import hashlib, os, socket, sys, time
path, port, host = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(path, "rb") as f:
    digest = hashlib.sha256(f.read()).hexdigest()
size = os.path.getsize(path)
s = socket.create_connection((host, port), timeout=120)
start = time.monotonic()
with open(path, "rb") as f:
    s.sendfile(f)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(size, digest, "%.1f" % (size / (time.monotonic() - start) / 1e6))
"""

# Creates one object of each kind through the provider and holds them
# until /tmp/hold.release appears (60 s at most), so that the host can
# look at them meanwhile. The RC QP is connected to itself (PSNs from
# 100, path MTU 1024) and has sent itself one 3000-byte message, three
# packets. Prints "ready KEY QPN LID" once that is done.
HOLD_OBJECTS_SCRIPT = r"""
import os, time
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.mr import MR
from pyverbs.cq import CQ
from pyverbs.srq import SRQ, SrqInitAttr, SrqAttr
from pyverbs.qp import QP, QPInitAttr, QPCap, QPAttr
from pyverbs.wr import RecvWR, SendWR, SGE

ctx = Context(name="pib_0")
lid = ctx.query_port(1).lid
pd = PD(ctx)
mr = MR(pd, 65536, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ)
cq = CQ(ctx, 100)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=32, max_sge=2)))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(16, 8, 2, 2)))
attr = QPAttr(port_num=1, path_mtu=e.IBV_MTU_1024)
attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE
attr.dest_qp_num = qp.qp_num
attr.rq_psn = attr.sq_psn = 100
attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
attr.ah_attr = AHAttr(dlid=lid, port_num=1)
qp.to_rts(attr)
qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 4096, mr.lkey)]))
qp.post_send(SendWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 8192, 3000, mr.lkey)]))
done, deadline = 0, time.monotonic() + 10
while done < 2 and time.monotonic() < deadline:
    done += cq.poll()[0]
print("ready", hex(mr.lkey), qp.qp_num, lid, "completions", done, flush=True)
deadline = time.monotonic() + 60
while not os.path.exists("/tmp/hold.release") and time.monotonic() < deadline:
    time.sleep(0.2)
for obj in (qp, srq, cq, mr, pd):
    obj.close()
ctx.close()
"""

# Waits until the host creates /tmp/inject.N (2 minutes at most): how the
# phased scripts below let the host act between their steps.
WAIT_FOR_PHASE = r"""
def phase(n):
    deadline = time.monotonic() + 120
    while not os.path.exists(f"/tmp/inject.{n}"):
        if time.monotonic() > deadline:
            sys.exit(f"phase {n} never came")
        time.sleep(0.1)
"""

# The guest's side of the test facilities' end-to-end test (docs/prm.md
# §10). It works in phases; the host arms an injection (./pib inject),
# then lets phase N run by creating /tmp/inject.N. Prints:
#   ready UD_QPN RC_QPN        once its objects exist
#   created-cq errno N         phase 1: a CQ whose creation the host failed
#   created-cq ok              ... and the next one
#   wc ID status S vendor_err V  phase 2: the UD send the host failed
#   qp state S                 ... and the UD QP's state after it
#   event NAME                 phases 3 and 4: each async event that came
#   polled N                   phases 4 and 5: completions found
INJECTION_SCRIPT = WAIT_FOR_PHASE + r"""
import os, sys, time
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

NAMES = {getattr(e, n): n[len("IBV_EVENT_"):] for n in dir(e) if n.startswith("IBV_EVENT_")}
QKEY = 0x11111111


def ud_qp():
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1)))
    attr = QPAttr(port_num=1)
    attr.qkey = QKEY
    qp.to_rts(attr)
    return qp

def send_to_self(qp):
    qp.post_recv(RecvWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf, 4096, mr.lkey)]))
    wr = SendWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf + 8192, 64, mr.lkey)])
    wr.set_wr_ud(ah, qp.qp_num, QKEY)
    qp.post_send(wr)

def poll(expect, seconds=10):
    found, deadline = [], time.monotonic() + seconds
    while len(found) < expect and time.monotonic() < deadline:
        n, wcs = cq.poll(num_entries=expect)
        found += wcs[:n]
        time.sleep(0.05)
    return found

def events(count):
    for _ in range(count):
        event = ctx.get_async_event()
        print("event", NAMES.get(event.event_type, event.event_type), flush=True)
        event.ack()

ctx = Context(name="pib_0")
pd = PD(ctx)
mr = MR(pd, 16384, e.IBV_ACCESS_LOCAL_WRITE)
cq = CQ(ctx, 8)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=16, max_sge=3)))
lid = ctx.query_port(1).lid
ah = AH(pd, attr=AHAttr(dlid=lid, port_num=1))
ud = ud_qp()
rc = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=QPCap(8, 0, 1, 1)))
rc.to_init(QPAttr(port_num=1))
print("ready", ud.qp_num, rc.qp_num, flush=True)

phase(1)
try:
    CQ(ctx, 4)
    print("created-cq ok")
except PyverbsRDMAError as err:
    print("created-cq errno", err.error_code)
extra = CQ(ctx, 4)
print("created-cq ok", flush=True)

phase(2)
send_to_self(ud)
for wc in poll(2):  # the send, then the receive the error flushed
    print("wc", wc.wr_id, "status", wc.status, "vendor_err", hex(wc.vendor_err), flush=True)
print("qp state", ud.query(e.IBV_QP_STATE)[0].qp_state, flush=True)

phase(3)
events(7)

phase(4)
ud2 = ud_qp()
send_to_self(ud2)
events(1)
print("polled", len(poll(2, seconds=2)), flush=True)

phase(5)
send_to_self(ud2)
print("polled", len(poll(2)), flush=True)
"""

# One CQ on each completion vector, each with a completion channel: a UD
# send to itself on each, then the channel's event. Prints
# "vectors N" and, per vector, "vector V event" once its event came.
VECTORS_SCRIPT = r"""
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr
from pyverbs.cq import CQ, CompChannel
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE

ctx = Context(name="pib_0")
pd = PD(ctx)
mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
ah = AH(pd, attr=AHAttr(dlid=ctx.query_port(1).lid, port_num=1))
print("vectors", ctx.num_comp_vectors, flush=True)
for vector in range(ctx.num_comp_vectors):
    channel = CompChannel(ctx)
    cq = CQ(ctx, 8, None, channel, vector)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))
    attr = QPAttr(port_num=1)
    attr.qkey = 0x22222222
    qp.to_rts(attr)
    cq.req_notify()
    qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 4096, mr.lkey)]))
    wr = SendWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 4096, 32, mr.lkey)])
    wr.set_wr_ud(ah, qp.qp_num, 0x22222222)
    qp.post_send(wr)
    channel.get_cq_event(cq)
    cq.ack_events(1)
    print("vector", vector, "event", flush=True)
    for obj in (qp, cq, channel):
        obj.close()
"""

# The guest's side of stopping a completion EQ (docs/prm.md §10): a CQ on
# completion vector 1 with a completion channel, driven in phases as
# INJECTION_SCRIPT is. Prints "ready"; in phase 1 (the EQ stopped) arms the
# CQ, sends to itself and prints "polled N" for the completions found
# without any event; in phase 2 (resumed) does the same and prints "event"
# once the channel's event came, then "polled N".
EQ_SCRIPT = WAIT_FOR_PHASE + r"""
import os, sys, time
import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr
from pyverbs.cq import CQ, CompChannel
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import RecvWR, SendWR, SGE


def send_to_self():
    qp.post_recv(RecvWR(wr_id=1, num_sge=1, sg=[SGE(mr.buf, 4096, mr.lkey)]))
    wr = SendWR(wr_id=2, num_sge=1, sg=[SGE(mr.buf + 4096, 32, mr.lkey)])
    wr.set_wr_ud(ah, qp.qp_num, 0x33333333)
    qp.post_send(wr)

def poll(expect):
    found, deadline = 0, time.monotonic() + 10
    while found < expect and time.monotonic() < deadline:
        found += cq.poll(num_entries=expect)[0]
        time.sleep(0.05)
    return found

ctx = Context(name="pib_0")
pd = PD(ctx)
mr = MR(pd, 8192, e.IBV_ACCESS_LOCAL_WRITE)
ah = AH(pd, attr=AHAttr(dlid=ctx.query_port(1).lid, port_num=1))
channel = CompChannel(ctx)
cq = CQ(ctx, 8, None, channel, 1)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_UD, scq=cq, rcq=cq, cap=QPCap(4, 4, 1, 1)))
attr = QPAttr(port_num=1)
attr.qkey = 0x33333333
qp.to_rts(attr)
print("ready", flush=True)

phase(1)
cq.req_notify()
send_to_self()
print("polled", poll(2), flush=True)

phase(2)
cq.req_notify()
send_to_self()
channel.get_cq_event(cq)
cq.ack_events(1)
print("event", flush=True)
print("polled", poll(2), flush=True)
"""

# The start of a pyverbs script: pib_0's context `ctx`, a PD `pd`, an MR
# `mr` of 2 * SIZE * SLOTS bytes (messages out, then in) and
# connect_to_itself(qp), which takes an RC QP to RTS, connected to itself.
_SELF_CONNECTED_PRELUDE = r"""
import errno, os, time
import pyverbs.enums as e
from pyverbs.addr import AHAttr
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

SIZE, SLOTS = 512, 64
ctx = Context(name="pib_0")
pd = PD(ctx)
mr = MR(pd, 2 * SIZE * SLOTS, e.IBV_ACCESS_LOCAL_WRITE)

def connect_to_itself(qp):
    attr = QPAttr(port_num=1)
    attr.path_mtu = e.IBV_MTU_1024
    attr.dest_qp_num = qp.qp_num
    attr.ah_attr = AHAttr(port_num=1, dlid=ctx.query_port(1).lid)
    attr.timeout, attr.retry_cnt, attr.rnr_retry, attr.min_rnr_timer = 14, 7, 7, 1
    qp.to_rts(attr)
"""

# ibv_resize_cq with completions waiting (docs/prm.md §6.1): an RC QP sends
# to itself, the CQ grows while CQEs are unpolled, then shrinks; every
# completion arrives once, in order, and every message's bytes are equal.
RESIZE_CQ_SCRIPT = _SELF_CONNECTED_PRELUDE + r"""
cq = CQ(ctx, 8)
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(SLOTS, SLOTS, 1, 1)))
connect_to_itself(qp)
sent, seen = {}, []

def exchange(i):
    data = os.urandom(SIZE)
    sent[i] = data
    mr.write(data, SIZE, i * SIZE)
    recv_at = (SLOTS + i) * SIZE
    qp.post_recv(RecvWR(1000 + i, 1, [SGE(mr.buf + recv_at, SIZE, mr.lkey)]))
    qp.post_send(SendWR(i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf + i * SIZE, SIZE, mr.lkey)]))

def poll(most):
    got, deadline = [], time.monotonic() + 10
    while len(got) < most and time.monotonic() < deadline:
        n, wcs = cq.poll(most - len(got))
        for wc in wcs[:n]:
            assert wc.status == e.IBV_WC_SUCCESS, wc
            got.append(wc.wr_id)
    seen.extend(got)
    return got

for i in range(3):
    exchange(i)
print("polled before", len(poll(2)))
cq.resize(32)
print("grew to", cq.cqe, "with 4 waiting")
for i in range(3, 13):
    exchange(i)
print("polled after", len(poll(24)))
cq.resize(4)
print("shrank to", cq.cqe)
for i in range(13, 15):
    exchange(i)
try:
    cq.resize(2)
    print("too small: accepted")
except PyverbsRDMAError as ex:
    print("too small: refused", errno.errorcode.get(ex.error_code, ex.error_code))
print("polled last", len(poll(4)))
print("extra", cq.poll(1)[0])
sends = [w for w in seen if w < 1000]
recvs = [w - 1000 for w in seen if w >= 1000]
print("in order", sends == list(range(15)) and recvs == list(range(15)))
equal = all(mr.read(SIZE, (SLOTS + i) * SIZE) == sent[i] for i in range(15))
print("bytes equal", equal)
"""

# ibv_destroy_qp with completions not yet polled: two RC QPs, each sending
# to itself, share one CQ; the first is destroyed while its completions
# and the second's wait, and the CQ then yields the second's alone, in
# order (what mlx5's provider does, and libfabric's RxM counts on).
DESTROY_QP_SCRIPT = _SELF_CONNECTED_PRELUDE + r"""
cq = CQ(ctx, 64)
qps = [QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(8, 8, 1, 1)))
       for _ in range(2)]
for qp in qps:
    connect_to_itself(qp)
for n, qp in enumerate(qps):
    for i in range(4):
        slot = n * 8 + i
        qp.post_recv(RecvWR(1000 + slot, 1, [SGE(mr.buf + (SLOTS + slot) * SIZE, SIZE, mr.lkey)]))
        qp.post_send(SendWR(slot, opcode=e.IBV_WR_SEND, num_sge=1,
                            sg=[SGE(mr.buf + slot * SIZE, SIZE, mr.lkey)]))
time.sleep(2)  # every completion written, none polled
gone, kept = qps[0].qp_num, qps[1].qp_num
qps[0].close()
got = []
deadline = time.monotonic() + 10
while len(got) < 8 and time.monotonic() < deadline:
    n, wcs = cq.poll(16)
    got += [(wc.qp_num, wc.wr_id, wc.status) for wc in wcs[:n]]
    if not n:
        time.sleep(0.1)
time.sleep(0.5)
n, wcs = cq.poll(16)
got += [(wc.qp_num, wc.wr_id, wc.status) for wc in wcs[:n]]
print("polled", len(got))
print("of the destroyed QP", sum(1 for q, _, _ in got if q == gone))
sends = [w for q, w, _ in got if q == kept and w < 1000]
recvs = [w - 1000 for q, w, _ in got if q == kept and w >= 1000]
print("the other's in order", sends == [8, 9, 10, 11] and recvs == [8, 9, 10, 11])
print("all successful", all(s == e.IBV_WC_SUCCESS for _, _, s in got))
"""

# Completion timestamps (docs/prm.md §2, §7.3): the device's clock read
# from user space, and an RC QP sending to itself through an extended CQ
# that asks for timestamps; every CQE's time lies between the clock read
# before the first post and after the last poll, no completion is
# stamped before its SEND was posted, and every message's bytes are equal.
TIMESTAMP_SCRIPT = _SELF_CONNECTED_PRELUDE + r"""
from pyverbs.cq import CQEX, CqInitAttrEx, PollCqAttr

attr = ctx.query_device_ex()
print("hca_core_clock", attr.hca_core_clock)
print("timestamp_mask", hex(attr.completion_timestamp_mask))

def clock():
    return ctx.query_rt_values_ex()[1]

t0, w0 = clock(), time.monotonic_ns()
time.sleep(0.5)
t1, w1 = clock(), time.monotonic_ns()
# The core clock is QEMU's virtual clock: it runs with the guest's.
print("clock/guest ratio", round((t1 - t0) / (w1 - w0), 1))

flags = e.IBV_WC_STANDARD_FLAGS | e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
cq = CQEX(ctx, CqInitAttrEx(cqe=64, wc_flags=flags))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(SLOTS, SLOTS, 1, 1)))
connect_to_itself(qp)
N = 8
sent, posted, stamps = {}, {}, {}
before = clock()
for i in range(N):
    data = os.urandom(SIZE)
    sent[i] = data
    mr.write(data, SIZE, i * SIZE)
    qp.post_recv(RecvWR(1000 + i, 1, [SGE(mr.buf + (SLOTS + i) * SIZE, SIZE, mr.lkey)]))
    posted[i] = clock()
    qp.post_send(SendWR(i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf + i * SIZE, SIZE, mr.lkey)]))
    time.sleep(0.02)

deadline = time.monotonic() + 10
while len(stamps) < 2 * N and time.monotonic() < deadline:
    if cq.start_poll(PollCqAttr()) != 0:
        continue
    while True:
        assert cq.status == e.IBV_WC_SUCCESS, cq.status
        stamps[cq.wr_id] = cq.read_timestamp()
        if cq.poll_next() != 0:
            break
    cq.end_poll()
after = clock()
print("completions", len(stamps))
print("within the clock reads", all(before <= t <= after for t in stamps.values()))
print("after their post", all(min(stamps[i], stamps[1000 + i]) >= posted[i] for i in range(N)))
print("sends in order", all(stamps[i] <= stamps[i + 1] for i in range(N - 1)))
print("bytes equal", all(mr.read(SIZE, (SLOTS + i) * SIZE) == sent[i] for i in range(N)))
wall = CqInitAttrEx(cqe=4, wc_flags=e.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)
try:
    CQEX(ctx, wall)
    print("wallclock: accepted")
except PyverbsRDMAError as ex:
    print("wallclock: refused", errno.errorcode.get(ex.error_code, ex.error_code))
"""

# ibv_modify_srq(IBV_SRQ_MAX_WR) with WQEs posted, some taken and not yet
# polled (docs/prm.md §6.4): an RC QP on the SRQ sends to itself before and
# after; every receive completes once, in posting order, into its buffer.
RESIZE_SRQ_SCRIPT = _SELF_CONNECTED_PRELUDE + r"""
cq = CQ(ctx, 128)
srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, srq=srq, cap=QPCap(SLOTS, 0, 1, 0)))
connect_to_itself(qp)
sent, recvs = {}, []

def post(i):
    srq.post_recv(RecvWR(1000 + i, 1, [SGE(mr.buf + (SLOTS + i) * SIZE, SIZE, mr.lkey)]))

def send(i):
    data = os.urandom(SIZE)
    sent[i] = data
    mr.write(data, SIZE, i * SIZE)
    qp.post_send(SendWR(i, opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(mr.buf + i * SIZE, SIZE, mr.lkey)]))

def poll_recvs(most):
    got, deadline = 0, time.monotonic() + 10
    while got < most and time.monotonic() < deadline:
        n, wcs = cq.poll(1)  # one at a time: stop right after the last asked for
        for wc in wcs[:n]:
            assert wc.status == e.IBV_WC_SUCCESS, wc
            if wc.wr_id >= 1000:
                recvs.append(wc.wr_id - 1000)
                got += 1
    return got

for i in range(4):
    post(i)
send(0)
send(1)
print("polled before", poll_recvs(1))
srq.modify(SrqAttr(max_wr=16), e.IBV_SRQ_MAX_WR)
print("max_wr now", srq.query().max_wr)
for i in range(4, 16):
    post(i)
for i in range(2, 16):
    send(i)
print("polled after", poll_recvs(15))
print("in order", recvs == list(range(16)))
print("bytes equal", all(mr.read(SIZE, (SLOTS + i) * SIZE) == sent[i] for i in range(16)))
"""
