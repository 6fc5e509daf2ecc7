"""The data path between two guests through the switch: the ibv_*_pingpong
programs at sizes below and above the path MTU, and the perftest set.
Each prints its numbers; the tests assert that every byte arrived."""

import re

from pibctl.pairs import PERFTEST, perftest, perftest_figure, perftest_shown, run_pair

# The pingpongs use a 1024-byte path MTU by default: 4096 bytes is four
# packets and 65536 sixty-four.
SIZES = (1, 1024, 4096, 65536)


def _pingpong(ctx, prog, size, iters, extra=(), port=18515):
    argv = [prog, "-s", str(size), "-n", str(iters), "-p", str(port), *extra]
    client, server_out, rc = run_pair(ctx, argv, argv, port=port)
    assert client.exitcode == 0 and rc == "0", (
        f"{' '.join(argv)}: client {client.exitcode}, server {rc}\n"
        f"client:\n{client.out}{client.err}\nserver:\n{server_out}")
    m = re.search(r"(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter", client.out)
    assert m and int(m.group(1)) == iters, client.out
    print(f"{prog} {size:>6} B x {iters}: {float(m.group(3)):8.1f} us/iter")


def test_rc_pingpong(ctx):
    for size in SIZES:
        _pingpong(ctx, "ibv_rc_pingpong", size, 50)
    _pingpong(ctx, "ibv_rc_pingpong", 4096, 20, extra=["-e"])  # completion events


def test_uc_pingpong(ctx):
    for size in SIZES:
        _pingpong(ctx, "ibv_uc_pingpong", size, 50)


def test_ud_pingpong(ctx):
    # UD messages fit in one packet: up to the path MTU (2048 by default).
    for size in (1, 1024, 2048):
        _pingpong(ctx, "ibv_ud_pingpong", size, 50)


def test_srq_pingpong(ctx):
    for size in SIZES:
        _pingpong(ctx, "ibv_srq_pingpong", size, 50)


def test_rc_pingpong_with_grh(ctx):
    _pingpong(ctx, "ibv_rc_pingpong", 4096, 20, extra=["-g", "0"])


def test_xsrq_pingpong(ctx):
    """XRC between guests (docs/prm.md §6.8): ibv_xsrq_pingpong's client
    in vm1 sends through XRC send QPs to the XRC SRQs of vm2's XRC domain,
    whose receive QPs take the messages, and back; polled, then with
    completion events, below and above the path MTU."""
    for size, extra in ((1, []), (4096, []), (65536, ["-e"])):
        argv = ["ibv_xsrq_pingpong", "-s", str(size), "-n", "50", "-p", "18532", *extra]
        client, server_out, rc = run_pair(ctx, argv, argv, port=18532)
        assert client.exitcode == 0 and rc == "0", (
            f"{' '.join(argv)}: client {client.exitcode}, server {rc}\n"
            f"client:\n{client.out}{client.err}\nserver:\n{server_out}")
        assert re.search(r"^success$", client.out, re.M), client.out
        assert re.search(r"^success$", server_out, re.M), server_out
        print(f"ibv_xsrq_pingpong {size:>6} B x 50{' (events)' if extra else ''}: success")


def test_rdma_core_65_loads_its_own_provider_build(ctx):
    """The provider built against the newest rdma-core in Debian (65, its
    private ABI 65): that rdma-core's libibverbs loads libpib-rdmav65.so in
    vm1 (rdma-core-65 runs its programs), and its ibv_rc_pingpong exchanges
    checked buffers (-c) with rdma-core 56.1's in vm2."""
    info = ctx.run("vm1", ["env", "LD_DEBUG=libs", "rdma-core-65", "ibv_devinfo", "-d", "pib_0"])
    assert re.search(r"^hca_id:\s*pib_0$", info.out, re.M), info.out + info.err
    assert re.search(r"state:\s*PORT_ACTIVE", info.out), info.out
    loaded = set(re.findall(r"calling init: (\S+)", info.err))
    assert "/opt/rdma-core-65/lib/libibverbs/libpib-rdmav65.so" in loaded, sorted(loaded)
    assert not any("rdmav34" in lib or lib.startswith("/usr/lib/x86_64-linux-gnu/libibverbs.so")
                   for lib in loaded), sorted(loaded)
    argv = ["ibv_rc_pingpong", "-s", "4096", "-n", "50", "-c", "-p", "18531"]
    client, server_out, rc = run_pair(ctx, argv, ["rdma-core-65", *argv], port=18531)
    assert client.exitcode == 0 and rc == "0", (
        f"client {client.exitcode}, server {rc}\nclient:\n{client.out}{client.err}\n"
        f"server:\n{server_out}")
    assert re.search(r"^50 iters in", client.out, re.M), client.out


def test_perftest_between_vms(ctx):
    for prog, args, kind in PERFTEST:
        argv = perftest(prog, *args, "-p", "18520")
        client, server_out, rc = run_pair(ctx, argv, argv, port=18520)
        assert client.exitcode == 0 and rc == "0", (
            f"{' '.join(argv)}: client {client.exitcode}, server {rc}\n"
            f"client:\n{client.out}{client.err}\nserver:\n{server_out}")
        value = perftest_figure(client, kind)
        what = "MiB/s average" if kind == "bw" else "us typical"
        print(f"{prog:<14} {perftest_shown(value, what)}")


# Under TCG a round trip takes about 25 ms: 300 of them are 8 s, and 600
# messages still tell a system call per message from none.
ROUND_TRIPS = 300


def test_no_system_call_per_message(ctx):
    """The provider posts and polls on the mmap'd rings: 300 round trips
    of ibv_rc_pingpong make no ioctl or write each (issue 5's check)."""
    argv = ["ibv_rc_pingpong", "-n", str(ROUND_TRIPS), "-p", "18530"]
    client, server_out, rc = run_pair(
        ctx, argv, ["strace", "-f", "-c", "-o", "/tmp/strace.txt", *argv], port=18530)
    assert client.exitcode == 0 and rc == "0", (client.out, client.err, server_out)
    table = ctx.run("vm1", ["cat", "/tmp/strace.txt"]).out
    calls = {m.group(2): int(m.group(1))
             for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", table, re.M)}
    print(f"system calls for {ROUND_TRIPS} round trips: ioctl {calls.get('ioctl', 0)}, "
          f"write {calls.get('write', 0)}, read {calls.get('read', 0)}, total {calls.get('total', 0)}")
    assert calls, table
    # Setup and teardown need a few dozen; a system call per message would
    # be 600 (2 messages a round trip).
    for name in ("ioctl", "write", "read"):
        assert calls.get(name, 0) < 200, table
