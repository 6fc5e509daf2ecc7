"""rdma_cm between guests over their IPoIB addresses (vmN-ib): address and
route resolution through IPoIB and the SA, connections by the kernel's CM
over QP1, data over the provider. rping with data verification, ucmatose
(RC), udaddy (UD), mckey (a multicast group joined through the SA) and
perftest with -R."""

import pytest

from pibctl.pairs import (ipoib_up, output_contains, perftest, perftest_figure, perftest_shown,
                          rdma_cm_listening, run_pair)

# perftest's own race (linux-rdma/perftest#93): with -R its server makes
# the listening ID of the test's connection only after the handshake, and
# its client connects right after it. A client first is rejected by the
# server's CM, reason 8 (IB CM: no listener for the service ID); perftest
# then retries on the IDs it has just destroyed, and crashes in librdmacm
# (the kernel logs it). The pair is then run again on a new port, as
# perftest's retry meant to.
PERFTEST_RACE = "Event: RDMA_CM_EVENT_REJECTED; error: 8."
pytestmark = pytest.mark.kernel_log_expected(
    "general protection fault ip:",  # only with PERFTEST_RACE, checked below
)


def _pair_result(ctx, server, client, port, **kw):
    ipoib_up(ctx)  # earlier tests may have reloaded the driver
    client_result, server_out, rc = run_pair(ctx, server, client, port=port, **kw)
    assert client_result.exitcode == 0 and rc == "0", (
        f"{' '.join(client)}: client {client_result.exitcode}, server {rc}\n"
        f"client:\n{client_result.out[-3000:]}{client_result.err[-2000:]}\n"
        f"server:\n{server_out[-3000:]}")
    return client_result, server_out


def _pair(ctx, server, client, port, **kw):
    client_result, server_out = _pair_result(ctx, server, client, port, **kw)
    return client_result.out, server_out


def test_rping_verifies_its_data(ctx):
    # -V: each side checks every byte of the RDMA READ and WRITE buffers.
    args = ["-V", "-C", "20", "-S", "4096"]
    client, _ = _pair(ctx, ["rping", "-s", "-a", "0.0.0.0", "-p", "7174", *args],
                      ["rping", "-c", "-p", "7174", *args, "-a"], 7174,
                      ready=rdma_cm_listening(7174), address="vm2-ib")
    assert "error" not in client.lower(), client
    print("rping: 20 pings of 4096 bytes, data verified on both sides")


def _all_transfers_done(*outputs):
    """librdmacm's examples end with these lines when every message arrived."""
    for out in outputs:
        assert "data transfers complete" in out and "return status 0" in out, out


def _connect_and_transfer(ctx, prog, size, port):
    """`prog` (ucmatose, udaddy): 2 endpoints x 20 messages of `size` bytes."""
    args = ["-c", "2", "-C", "20", "-S", str(size)]
    _all_transfers_done(*_pair(ctx, [prog, *args], [prog, *args, "-s"], port,
                               ready=rdma_cm_listening(port), address="vm2-ib"))


def test_ucmatose(ctx):
    _connect_and_transfer(ctx, "ucmatose", 4096, 7471)
    print("ucmatose: 2 RC connections x 20 messages of 4096 bytes")


def test_udaddy(ctx):
    _connect_and_transfer(ctx, "udaddy", 1024, 7174)
    print("udaddy: 2 UD endpoints x 20 messages of 1024 bytes")


def test_mckey(ctx):
    # vm2 joins 239.1.2.3 (an MGID from the SA) and waits for 20 messages;
    # vm1 joins as a sender and sends them to the group.
    args = ["-m", "239.1.2.3", "-C", "20", "-S", "1024"]
    client, server = _pair(ctx, ["stdbuf", "-oL", "mckey", *args, "-b", "vm2-ib"],
                           ["mckey", *args, "-s", "-b"], 18570,
                           ready=output_contains("joined"), address="vm1-ib")
    _all_transfers_done(client, server)
    print("mckey: 20 multicast messages of 1024 bytes, " +
          server.split("joined ", 1)[1].splitlines()[0])


PERFTEST = [("ib_send_bw", "bw"), ("ib_write_bw", "bw"), ("ib_read_lat", "lat")]


def _perftest_pair(ctx, prog, kind, port):
    argv = perftest(prog, "-R", "-p", str(port), "-n", "100",
                    "-s", "65536" if kind == "bw" else "8")
    return run_pair(ctx, argv, argv, port=port, ready=rdma_cm_listening(port),
                    address="vm2-ib")


def _crashes(ctx, vm):
    """The user processes the kernel of `vm` saw crash since it booted."""
    out = ctx.sh(vm, "dmesg | grep -c 'general protection fault ip:\\|segfault at' || true",
                 check=False).out.strip()
    return int(out or 0)


def test_perftest_connects_with_rdma_cm(ctx):
    # A port per program, and per attempt: the last server's listening ID
    # may outlive it for a moment, and would make the next one look ready
    # too early.
    crashes, races = _crashes(ctx, "vm1"), 0
    for n, (prog, kind) in enumerate(PERFTEST):
        port = 18575 + n
        ipoib_up(ctx)  # earlier tests may have reloaded the driver
        client, server_out, rc = _perftest_pair(ctx, prog, kind, port)
        if client.exitcode != 0 and PERFTEST_RACE in client.err + client.out:
            races += 1
            print(f"{prog} -R: its client connected before its server listened "
                  "(perftest#93); run again")
            ipoib_up(ctx)
            client, server_out, rc = _perftest_pair(ctx, prog, kind, port + 10)
        assert client.exitcode == 0 and rc == "0", (
            f"{prog} -R: client {client.exitcode}, server {rc}\n"
            f"client:\n{client.out[-3000:]}{client.err[-2000:]}\nserver:\n{server_out[-3000:]}")
        what = "MiB/s average" if kind == "bw" else "us typical"
        print(f"{prog} -R: {perftest_shown(perftest_figure(client, kind), what)}")
    # The kernel log may show perftest's crash of each race, and no other.
    assert _crashes(ctx, "vm1") - crashes <= races, ctx.sh("vm1", "dmesg | tail -20").out
