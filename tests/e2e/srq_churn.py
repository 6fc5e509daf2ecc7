"""A guest program (test_connectx_verbs.py runs two at once on mlx5_0):
SRQs made and destroyed in a loop, to race another process doing the
same in the driver's SRQ table.

mlx5_ib forgets a destroyed SRQ's number only after DESTROY_SRQ has
returned; a device that gave that number at once to the other process's
next SRQ would have the erase remove the newer SRQ, whose own destroy
then fails (a kernel WARNING, EINVAL here). Every destroy must succeed.
Prints how many SRQs it made, then PASS."""

import sys

from pyverbs.device import Context
from pyverbs.pd import PD
from pyverbs.srq import SRQ, SrqAttr, SrqInitAttr


def main(device, count):
    with Context(name=device) as ctx, PD(ctx) as pd:
        for _ in range(count):
            srq = SRQ(pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
            srq.close()  # raises if the driver refuses to destroy it
    print(f"{count} SRQs made and destroyed")
    print("PASS")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
