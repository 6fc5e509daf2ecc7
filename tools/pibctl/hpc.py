"""The HPC stack's own measuring tools between two guests, for the tests
and ./pib bench: ucx_perftest, and pib-mpi-check's ping-pong under Open
MPI. Each returns numbers or raises AssertionError with both sides'
output."""

import re

from pibctl.pairs import run_pair

UCX_PORT = 18620


def ucx_perftest(ctx, tls, test, size, iters, device="pib_0:1", extra_env=(), server_vm="vm2",
                 client_vm="vm1"):
    """One ucx_perftest run, client_vm to server_vm, with UCX_TLS=`tls` on
    `device` (and `extra_env`, NAME=VALUE strings).
    Returns (latency in us, bandwidth in MB/s): the overall ones of its
    'Final:' row (iterations; latency median, average, overall; bandwidth
    average, overall; message rate average, overall). The averages are
    over the last reporting interval only, which may be empty: 0 or nan."""
    env = ["env", f"UCX_TLS={tls}", f"UCX_NET_DEVICES={device}", *extra_env]
    # -P 0: Debian's ucx_perftest starts in MPI mode unless told.
    server = [*env, "ucx_perftest", "-P", "0", "-p", str(UCX_PORT)]
    client = [*env, "ucx_perftest", "-P", "0", "-p", str(UCX_PORT), "-t", test, "-s", str(size),
              "-n", str(iters), "-w", "10"]
    result, server_out, rc = run_pair(ctx, server, client, port=UCX_PORT, timeout=120,
                                      server_vm=server_vm, client_vm=client_vm)
    where = (f"{' '.join(client)}: client {result.exitcode}, server {rc}\n"
             f"{result.out}{result.err}\n{server_out}")
    assert result.exitcode == 0 and rc == "0", where
    final = re.search(r"^Final:\s+(.*)$", result.out, re.M)
    assert final, where
    numbers = [float(x) for x in final.group(1).split()]
    assert len(numbers) >= 8 and numbers[0] == iters, where
    latency, bandwidth, rate = numbers[3], numbers[5], numbers[7]
    # nan fails too. A latency test's bandwidth may print as 0.00 (8 B per
    # 2 ms is 0.004 MB/s, seen on a busy host): its message rate counts.
    assert latency > 0 and rate > 0 and (bandwidth > 0 or test.endswith("lat")), where
    return latency, bandwidth


def mpi_pingpong(ctx, iters, extra_env=()):
    """pib-mpi-check --pingpong under Open MPI over UCX, rank 0 on vm1 and
    rank 1 on vm2. Returns {bytes: (one-way latency in us, MB/s)}."""
    env = [x for kv in extra_env for x in ("-x", kv)]
    argv = ["mpirun", "-np", "2", "--host", "vm1,vm2", "--mca", "pml", "ucx", *env,
            "pib-mpi-check.openmpi", "--pingpong", str(iters)]
    result = ctx.run("vm1", ["timeout", "300", *argv], timeout=330, check=False)
    where = f"{' '.join(argv)}: exit {result.exitcode}\n{result.out}{result.err}"
    assert result.exitcode == 0, where
    found = {int(m.group(1)): (float(m.group(2)), float(m.group(3)))
             for m in re.finditer(r"^pingpong (\d+) B: \d+ round trips, ([\d.]+) us one way, "
                                  r"([\d.]+) MB/s", result.out, re.M)}
    assert 8 in found and (1 << 20) in found, where
    return found
