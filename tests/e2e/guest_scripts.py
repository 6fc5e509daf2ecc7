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
