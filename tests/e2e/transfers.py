"""Transfers between guests whose every byte is checked: helpers that
several test modules share."""

from guest_scripts import TCP_SINK_SCRIPT, TCP_SOURCE_SCRIPT
from pibctl.pairs import run_pair


def bulk_tcp(ctx, megabytes, port, timeout=240, source_vm="vm1", sink_vm="vm2"):
    """`megabytes` MiB of random bytes from source_vm to sink_vm over TCP on
    IPoIB; the byte count and SHA-256 must match on both ends. Returns MB/s."""
    ctx.sh(source_vm, f"head -c {megabytes}M /dev/urandom > /tmp/bulk")
    sink = ["python3", "-c", TCP_SINK_SCRIPT, str(port)]
    source = ["python3", "-c", TCP_SOURCE_SCRIPT, "/tmp/bulk", str(port)]
    client, server_out, rc = run_pair(ctx, sink, source, port=port, timeout=timeout,
                                      server_vm=sink_vm, client_vm=source_vm,
                                      address=f"{sink_vm}-ib")
    assert client.exitcode == 0 and rc == "0", f"source:\n{client.out}{client.err}\nsink:\n{server_out}"
    sent_bytes, sent_hash, mbps = client.out.split()
    got_bytes, got_hash = server_out.split()
    assert sent_bytes == got_bytes == str(megabytes << 20), (client.out, server_out)
    assert sent_hash == got_hash, (client.out, server_out)
    return float(mbps)
