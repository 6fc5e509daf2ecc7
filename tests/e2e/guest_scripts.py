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
