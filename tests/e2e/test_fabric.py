"""The fabric launcher: names, management network, the exec channel."""


def test_guests_know_their_names_and_reach_each_other(ctx):
    for vm in ctx.vms:
        assert ctx.run(vm, ["hostname"]).out.strip() == vm
    for vm in ctx.vms:
        for peer in ctx.vms:
            if peer != vm:
                ctx.run(vm, ["ping", "-c", "2", "-W", "5", peer], timeout=30)


def test_exec_returns_stdout_stderr_and_status(ctx):
    proc = ctx.pib("exec", "vm1", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert proc.returncode == 3, proc
    assert proc.stdout == "out\n", proc
    assert proc.stderr == "err\n", proc


def test_exec_passes_stdin_and_enforces_timeout(ctx):
    proc = ctx.pib("exec", "--stdin", "vm1", "--", "wc", "-c", stdin="12345")
    assert proc.stdout.strip() == "5", proc
    proc = ctx.pib("exec", "--timeout", "2", "vm1", "--", "sleep", "30")
    assert proc.returncode == 124, proc


def test_exec_of_unknown_vm_fails_clearly(ctx):
    proc = ctx.pib("exec", "vm99", "--", "true")
    assert proc.returncode == 1
    assert "no VM named vm99" in proc.stderr, proc.stderr


def test_status_lists_every_vm(ctx):
    proc = ctx.pib("fabric", "status")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for vm in ctx.vms:
        assert f"{vm} " in proc.stdout and "agent answering" in proc.stdout, proc.stdout



def test_console_reaches_the_guest_shell(ctx):
    proc = ctx.pib("console", "vm1", stdin="echo console-$((6*7))\n", timeout=60)
    assert proc.returncode == 0, proc
    assert "console-42" in proc.stdout, proc.stdout[-2000:]
