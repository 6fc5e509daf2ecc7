"""The stack HPC users run, between two guests on one switch: Debian's UCX
(ucx_perftest over rc_verbs and over ud_verbs), libfabric's verbs provider
(fi_pingpong over MSG endpoints and over ofi_rxm's RDM endpoints, with its
data checks) and MPICH (over UCX: Debian builds it for ch4:ucx only),
launched over ssh with keys ./pib fabric up made, and what the user guide
tells a user to do: copy a program into the guests and run mpirun -np 4
--host vm1,vm2 with nothing else. Open MPI's transports: test_openmpi.py."""

import re
import shlex

from mpi_runs import MESSAGE_BYTES, mpi_check
from odp_runs import ucx_and_mpi_on_demand
from transfers import xmit_bytes
from pibctl import mpi_build
from pibctl.hpc import ucx_perftest
from pibctl.pairs import ipoib_up, run_pair

# The packages of guest/packages.txt for this stack: nothing in them may
# need a library guest/leave-out.txt removed.
HPC_PACKAGES = ["libucx0", "ucx-utils", "libopenmpi40", "openmpi-bin", "libpmix2t64",
                "libmpich12", "mpich", "libfabric1", "libfabric-bin", "libhwloc15",
                "openssh-server", "openssh-client"]
FI_PORT = 18630


# Every ELF file of the packages, and what the dynamic loader cannot find
# for it (what ldd prints, without a shell and four processes per file,
# which took 22 s under TCG).
ELF_CHECK = r"""
import os, subprocess, sys
files = subprocess.run(["dpkg", "-L", *sys.argv[1:]], capture_output=True, text=True).stdout
for f in files.split("\n"):
    if not os.path.isfile(f) or os.path.islink(f):
        continue
    with open(f, "rb") as elf:
        if elf.read(4) != b"\x7fELF":
            continue
    print("== " + f)
    found = subprocess.run(["/lib64/ld-linux-x86-64.so.2", "--list", f], capture_output=True,
                           text=True)
    print("".join(line + "\n" for line in (found.stdout + found.stderr).splitlines()
                  if "not found" in line), end="")
"""


def test_nothing_left_out_is_needed(ctx):
    out = ctx.run("vm1", ["python3", "-c", ELF_CHECK, *HPC_PACKAGES]).out
    files = out.count("== ")
    missing = [line for line in out.splitlines() if "not found" in line]
    assert files > 50, out
    assert not missing, out
    left_out = ctx.sh("vm1", "dpkg-query -W -f '${Package} ${Status}\\n' libllvm17t64 "
                             "libamdhip64-5 libhwloc-plugins 2>/dev/null | grep ' installed$'; true").out
    assert not left_out.strip(), left_out
    print(f"{files} programs and libraries of {len(HPC_PACKAGES)} packages: every library found; "
          "ROCm, LLVM and hwloc's GPU plugins left out")


def test_ssh_between_the_guests_with_the_fabric_s_keys(ctx):
    ipoib_up(ctx)  # earlier tests may have reloaded the driver
    # known_hosts names each guest's own host key: no question, no warning.
    for src, dst in (("vm1", "vm2"), ("vm2", "vm1"), ("vm1", "vm2-ib")):
        result = ctx.run(src, ["ssh", "-o", "BatchMode=yes", dst, "hostname"], check=False)
        assert result.exitcode == 0 and result.out.strip() == dst.removesuffix("-ib"), (
            src, dst, result.out, result.err)
        assert "warning" not in result.err.lower(), result.err
    # No host key of the image: each guest has the one its fabric made.
    keys = {vm: ctx.run(vm, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).out.split()[1]
            for vm in ("vm1", "vm2")}
    assert keys["vm1"] != keys["vm2"], keys
    print("ssh vm1 -> vm2, vm2 -> vm1, vm1 -> vm2-ib: root with the fabric's key, "
          "host keys checked")


def test_ucx_perftest_over_rc_verbs_and_ud_verbs(ctx):
    # rc_verbs carries the data; ud_verbs only wires the endpoints up.
    for tls in ("rc_verbs,ud_verbs:aux", "ud_verbs"):
        for test, size, iters in (("tag_lat", 8, 200), ("tag_bw", 1 << 20, 40),
                                  ("stream_lat", 8, 200), ("stream_bw", 1 << 20, 40)):
            latency, bandwidth = ucx_perftest(ctx, tls, test, size, iters)
            shown = f"{latency:.1f} us" if test.endswith("lat") else f"{bandwidth:.1f} MB/s"
            print(f"ucx_perftest {tls.split(',')[0]:<9} {test:<10} {size:>8} B: {shown}")


def _fi_pingpong(ctx, endpoint, provider, mode="msg"):
    args = ["fi_pingpong", "-p", provider, "-e", endpoint, "-m", mode, "-I", "100",
            "-S", "65536", "-c", "-B", str(FI_PORT)]
    client_args = [a if a != "-B" else "-P" for a in args]
    result, server_out, rc = run_pair(ctx, args, client_args, port=FI_PORT, timeout=120,
                                      address="vm2-ib")
    where = f"{' '.join(args)}: client {result.exitcode}, server {rc}\n{result.out}{result.err}\n{server_out}"
    assert result.exitcode == 0 and rc == "0", where
    # bytes, #sent, #ack, total, time, MB/sec, usec/xfer, Mxfers/sec
    row = [line.split() for line in result.out.splitlines() if re.match(r"^\s*64k\s", line)]
    assert row and row[-1][1] == "100" and row[-1][2] == "=100", where
    return {"MB/s": row[-1][5], "us": row[-1][6]}


def test_fi_pingpong_over_verbs_msg_and_rxm_rdm(ctx):
    ipoib_up(ctx)  # the verbs provider finds vm2's HCA by its IPoIB address
    for endpoint, provider, mode in (("msg", "verbs", "msg"), ("rdm", "verbs;ofi_rxm", "msg"),
                                     ("rdm", "verbs;ofi_rxm", "tagged")):
        row = _fi_pingpong(ctx, endpoint, provider, mode)
        print(f"fi_pingpong -p '{provider}' -e {endpoint} -m {mode}: 100 x 64 KiB, data "
              f"checked (-c), {row['MB/s']} MB/s, {row['us']} us per transfer")


def test_ucx_and_mpi_over_on_demand_registrations(ctx):
    """UCX's on-demand registration (odp_runs.py) between the two guests
    over rc_verbs on pib_0, against pinned memory, and Open MPI over it on
    2 ranks, every byte checked (docs/prm.md §6.9)."""
    ucx_and_mpi_on_demand(ctx, "pib_0:1", "rc_verbs,ud_verbs:aux", "vm2", "vm1", ("vm1", "vm2"), 2)


def test_mpich_over_ucx_on_2_and_4_ranks(ctx):
    mpi_check(ctx, "mpich", 2, "ucx")
    mpi_check(ctx, "mpich", 4, "ucx")


def _ipoib_sent(ctx, vm):
    """Bytes vm's IPoIB interface has sent (0 while it has none)."""
    out = ctx.sh(vm, "cat /sys/class/net/ib0/statistics/tx_bytes 2>/dev/null || echo 0").out
    return int(out)


def test_the_user_guide_s_mpirun(ctx):
    """./pib exec --stdin copies a program into each guest; mpirun with
    just -np and --host starts it on both."""
    program = mpi_build.binaries()[0].read_bytes()  # as a user's ./app, built on the host
    for vm in ("vm1", "vm2"):
        ctx.run(vm, ["sh", "-c", "cat > /root/app && chmod +x /root/app"], stdin=program)
    before = {vm: (xmit_bytes(ctx, vm), _ipoib_sent(ctx, vm)) for vm in ("vm1", "vm2")}
    result = ctx.run("vm1", ["mpirun", "-np", "4", "--host", "vm1,vm2", "/root/app"],
                     timeout=300, check=False)
    where = f"mpirun -np 4 --host vm1,vm2 /root/app: exit {result.exitcode}\n{result.out}{result.err}"
    assert result.exitcode == 0 and "every byte checked, all equal" in result.out, where
    assert "0@vm1" in result.out and "3@vm2" in result.out, where
    # Over the HCA's own transports, not TCP (over the management network
    # or IPoIB): the image lets Open MPI choose UCX
    # (guest/rootfs/etc/openmpi/openmpi-mca-params.conf).
    for vm in ("vm1", "vm2"):
        sent, by_ip = xmit_bytes(ctx, vm) - before[vm][0], _ipoib_sent(ctx, vm) - before[vm][1]
        assert sent >= MESSAGE_BYTES and by_ip < MESSAGE_BYTES // 4, (
            f"{vm}'s HCA sent {sent} bytes, {by_ip} of them from IPoIB: not over verbs\n{where}")
    print(f"mpirun -np 4 --host vm1,vm2 /root/app: {shlex.quote(result.out.splitlines()[-1])}; "
          f"{MESSAGE_BYTES} bytes from each rank to each other")
