"""pib-traffic (guest/traffic/) between vm1 and vm2: random data through
every operation (RC SEND with and without immediate and inline, WRITE,
WRITE with immediate, READ, compare-and-swap, fetch-and-add; UC SEND and
WRITE; UD SEND), 0 B to 16 MiB at unaligned offsets, on four QPs at once,
each with its own thread. Every byte is checked where it arrives, the
bytes around it must be untouched, and both ends' SHA-256 must agree."""

import pytest

from transfers import BackgroundTraffic, same_at_both_ends, traffic

pytestmark = pytest.mark.also_two_switches


def test_every_operation_moves_every_byte(ctx):
    lines = traffic(ctx, ["-q", "4", "-S", "20261122"])
    assert set(lines) == {"send", "send-imm", "send-inline", "write", "write-imm", "read", "cas",
                          "fadd", "uc-send", "uc-write", "ud-send"}
    total = sum(int(line["bytes"]) for line in lines.values())
    print(f"  {total} bytes in {sum(int(line['messages']) for line in lines.values())} messages")
    # 16 MiB messages went through every connected operation.
    assert int(lines["read"]["bytes"]) > 4 * 2 * (16 << 20)


def test_several_processes_at_once(ctx):
    """Three pib-traffic pairs at the same time between the same two guests:
    three processes per guest, each with its own QPs, PD and buffers."""
    runs = [BackgroundTraffic(ctx, ["-q", "2", "-s", "0,4097,65536,1M+3", "-n", "2",
                                    "-S", str(seed)], 18870 + seed) for seed in range(3)]
    for seed, run in enumerate(runs):
        rc, out, src, sout = run.wait()
        assert rc == 0 and src == 0, f"pair {seed}: client {rc}, server {src}\n{out}\n{sout}"
        lines = same_at_both_ends(out, sout)
        print(f"  pair {seed}: {sum(int(line['bytes']) for line in lines.values())} bytes, "
              "SHA-256 equal at both ends")
