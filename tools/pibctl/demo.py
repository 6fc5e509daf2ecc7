"""./pib demo: the main job. Sets up, boots the default fabric (or uses the
one already up) and shows, step by step, what pib-hca can do so far."""

import json
import time

from pibctl import fabric, paths, setup, ui
from pibctl.pairs import GuestShell, ipoib_up, perftest, rdma_cm_listening, run_pair


def _show(vm: str, argv, title: str) -> str:
    ui.step(title)
    ui.info(f"[{vm}]$ {' '.join(argv)}")
    result = fabric.exec_in(vm, argv, timeout=120)
    text = (result.out + result.err).rstrip()
    for line in text.splitlines():
        ui.info(f"    {line}")
    if result.exitcode != 0:
        raise ui.StepFailed(f"{' '.join(argv)} failed in {vm} (exit {result.exitcode})")
    return result.out


def _ibping(fab) -> None:
    """vm2 answers ibping; vm1 pings its LID across the switch."""
    if len(fab.vms) < 2:
        return
    a, b = fab.vms[0].name, fab.vms[1].name
    lid = int(fabric.exec_in(b, ["cat", "/sys/class/infiniband/pib_0/ports/1/lid"]).out, 16)
    fabric.exec_in(b, ["sh", "-c", "(timeout 30 ibping -S </dev/null >/dev/null 2>&1 &); sleep 1"])
    _show(a, ["ibping", "-c", "3", str(lid)], f"8. ibping from {a} to {b} (LID {lid}) across the switch")


def _pair(fab, title, argv, port, client_argv=None, address="vm2", **kw) -> None:
    """A server in vm2, its client in vm1; shows the client's output."""
    if len(fab.vms) < 2:
        return
    client_argv = client_argv or argv
    ui.step(title)
    ui.info(f"[vm2]$ {' '.join(argv)} &    [vm1]$ {' '.join(client_argv)} {address}")
    client, server_out, rc = run_pair(GuestShell(), argv, client_argv, port=port,
                                      address=address, **kw)
    for line in (client.out + client.err).rstrip().splitlines():
        ui.info(f"    {line}")
    if client.exitcode != 0 or rc != "0":
        raise ui.StepFailed(f"{argv[0]} failed: client {client.exitcode}, server {rc}\n{server_out}")


def run(vms: int = 2, accel: str = "tcg") -> int:
    setup.run()
    fab = fabric.load()
    if fab is None:
        start = time.monotonic()
        fab = fabric.up(vms=vms, accel=accel)
        ui.detail(f"fabric up, every port ACTIVE, in {time.monotonic() - start:.0f} s")
    else:
        ui.step(f"Using the fabric already up in {fab.run_dir}")
    first = fab.vms[0].name
    _show(first, ["lspci", "-nn", "-d", "1234:1b1b", "-vv"], "1. The pib-hca PCIe function in the guest")
    last = fab.vms[-1].name
    out = _show(first, ["sh", "-c", "modprobe -r pib && pib-regs json; modprobe pib && pib-ipoib-up"],
                "2. Its registers, read through sysfs with the driver unloaded")
    fabric.restart_sm(fab)  # the reload took the SM's port away
    regs = json.loads(out)
    ui.detail(f"ID register 0x{regs['ID']:08x} = \"PIBH\"; interface version "
              f"{regs['IF_VERSION'] >> 16}.{regs['IF_VERSION'] & 0xffff}; node GUID "
              f"{regs['NODE_GUID_HI']:08x}{regs['NODE_GUID_LO']:08x}")
    if len(fab.vms) > 1:
        peer = fab.vms[1].name
        _show(first, ["ping", "-c", "3", peer], f"3. The management network: {first} pings {peer}")
    _show(first, ["ibstat"], "4. The driver registered pib_0; opensm in vm1 made its port ACTIVE")
    _show(first, ["ibv_devinfo", "-v"], "5. User-space verbs through the provider: the device's own attributes")
    _show(last, ["ibnetdiscover"], f"6. The fabric opensm discovered, seen from {last}")
    _show(first, ["sminfo"], "7. The subnet manager")
    _ibping(fab)
    _pair(fab, "9. RC SEND/RECV from user space: ibv_rc_pingpong, 64 KiB messages (64 packets each)",
          ["ibv_rc_pingpong", "-s", "65536", "-n", "100", "-p", "18560"], 18560)
    _pair(fab, "10. RDMA WRITE bandwidth: ib_write_bw, 64 KiB",
          perftest("ib_write_bw", "-d", "pib_0", "-s", "65536", "-n", "200", "-p", "18561"), 18561)
    if len(fab.vms) > 1:
        ipoib_up(GuestShell(), [vm.name for vm in fab.vms[:2]])
        # The first datagrams wait for ARP and the path record; IPoIB
        # queues only a few, so resolve before the 64 KiB pings.
        fabric.exec_in(first, ["sh", "-c", "for i in $(seq 1 30); do "
                                           "ping -c 1 -W 1 vm2-ib >/dev/null && exit 0; done; exit 1"])
        _show(first, ["ping", "-c", "3", "-s", "65507", "vm2-ib"],
              "11. IPoIB (ib0, datagram mode): vm1 pings vm2-ib with 64 KiB datagrams")
        args = ["-v", "-V", "-C", "5", "-S", "64", "-p", "7174"]
        _pair(fab, "12. rdma_cm over IPoIB: rping -V (RDMA READ and WRITE, every byte checked)",
              ["rping", "-s", "-a", "0.0.0.0", *args], 7174,
              client_argv=["rping", "-c", *args, "-a"], address="vm2-ib",
              ready=rdma_cm_listening(7174))
    ui.step("What next")
    ui.info(f"  ./pib exec {first} -- cat /sys/kernel/debug/pib/pib_0/qp   objects and their states")
    ui.info(f"  ./pib console {first}                 its serial console (Ctrl-] leaves)")
    ui.info("  ./pib bench                           pib-hca against Soft-RoCE, and the core alone")
    ui.info("  ./pib fabric status | down")
    ui.info(f"  host logs: {paths.run_dir()}/vmN/qemu.log (guest errors, traces)")
    return 0
