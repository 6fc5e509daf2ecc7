"""Command-line interface of ./pib."""

import argparse
import os
import signal
import sys
import time

from pibctl import paths, ui

DESCRIPTION = """\
pib-hca: an emulated InfiniBand host channel adapter for QEMU, with a
fabric of guests to run real InfiniBand software on.

  ./pib demo    set everything up, boot the default fabric, show what works
  ./pib test    set everything up and run every test

For a CI job: ./pib run --share DIR -- COMMAND runs COMMAND on a fabric
that sees DIR, and exits with its status; ./pib container packs pib-hca
into an image for hosts of any Linux (docs/user-guide.md, "RDMA in your CI").

Caches live in $PIB_CACHE (default ~/.cache/pib-hca); the running fabric's
sockets, pids and logs in $PIB_RUN_DIR (default $PIB_CACHE/run). --accel
defaults to $PIB_ACCEL, or tcg.
"""


def _choose_kernel(args) -> None:
    """--kernel: every step after this (and what it starts) uses it."""
    if args.kernel:
        os.environ["PIB_KERNEL"] = args.kernel


def _cmd_setup(args) -> int:
    from pibctl import qemu_build, setup

    _choose_kernel(args)
    if args.qemu_src:
        qemu_build.choose(args.qemu_src)
    setup.run(skip_image=args.no_image)
    return 0


def _cmd_package(args) -> int:
    from pathlib import Path

    from pibctl import package, setup

    setup.run(skip_image=True)
    package.build_all(Path(args.output).resolve())
    return 0


def _cmd_qemu_patches(args) -> int:
    from pathlib import Path

    from pibctl import qemu_patches, sources

    written = qemu_patches.write_series(sources.fetch(sources.QEMU), Path(args.output))
    for patch in written:
        print(patch)
    return 0


def _accel(asked: str) -> str:
    if asked == "auto":
        return "kvm" if os.access("/dev/kvm", os.R_OK | os.W_OK) else "tcg"
    return asked


def _fabric_up_kwargs(args) -> dict:
    """fabric.up's arguments from the options _add_fabric_up_options adds."""
    from pathlib import Path

    from pibctl import topology
    from pibctl.own_kernel import OwnKernel

    topo = None
    if args.topology:
        if args.vms is not None or args.switches is not None:
            raise ui.StepFailed("--topology describes the VMs and switches; "
                                "drop --vms and --switches")
        try:
            topo = topology.parse(open(args.topology).read(), args.topology)
        except OSError as e:
            raise ui.StepFailed(f"cannot read {args.topology}: {e.strerror}") from None
        except topology.TopologyError as e:
            raise ui.StepFailed(str(e)) from None
    if args.simulate:
        if args.topology or args.switches is not None:
            raise ui.StepFailed("--simulate is the fabric; drop --topology and --switches")
        try:
            topo = topology.simulated(args.simulate, args.vms or 2)
        except topology.TopologyError as e:
            raise ui.StepFailed(str(e)) from None
    own = None
    if args.kernel:
        own = OwnKernel(kernel=Path(args.kernel), modules=Path(args.modules) if args.modules else None,
                        driver=not args.no_driver)
    elif args.modules or args.no_driver:
        raise ui.StepFailed("--modules and --no-driver go with --kernel PATH")
    return dict(vms=args.vms or 2, accel=_accel(args.accel), memory=args.memory, cpus=args.cpus,
                timeout=args.timeout, trace=args.trace, sm=not args.no_sm,
                switches=args.switches or 1, topology=topo, own=own,
                mlx5=tuple(n for n in args.mlx5.split(",") if n), cable=args.cable,
                boot=args.boot, share_dir=args.share or (topo.share if topo else ""))


def _cmd_fabric_up(args) -> int:
    from pibctl import fabric

    fabric.up(**_fabric_up_kwargs(args))
    return fabric.status()


def _cmd_fabric_down(args) -> int:
    from pibctl import fabric

    fabric.down()
    return 0


def _cmd_fabric_status(args) -> int:
    from pibctl import fabric

    return fabric.status(queues=args.queues)


def _cmd_fabric_fault(args) -> int:
    from pibctl import fabric

    return fabric.fault(args.port, args.spec)


def _cmd_fabric_migrate(args) -> int:
    from pibctl import fabric, migrate, ui

    fab = fabric.load()
    if fab is None:
        raise ui.StepFailed("no fabric is up: ./pib fabric up first")
    started = time.monotonic()
    moved = migrate.migrate(fab, args.vm)
    ui.info(f"{args.vm} moved to a new QEMU (pid {moved.pid}) in "
            f"{time.monotonic() - started:.1f} s: QEMU's migration took {moved.total_ms} ms, "
            f"of which the guest was stopped {moved.downtime_ms} ms; {moved.ram_mb:.0f} MB of "
            f"RAM sent")
    return 0


def _cmd_fabric_snapshot(args) -> int:
    import shutil

    from pibctl import fabric, snapshot

    if args.what == "list":
        for path in sorted(snapshot.snapshots_dir().glob("*/snapshot.json")):
            meta = snapshot.read_meta(path.parent)
            vms = ", ".join(v["name"] for v in meta["fabric"]["vms"])
            ui.info(f"{path.parent.name:<16} made {meta['made']}: {vms}")
        return 0
    if not args.name:
        raise ui.StepFailed(f"fabric snapshot {args.what} needs a NAME")
    path = snapshot.path_of(args.name)
    if args.what == "delete":
        if not path.is_dir():
            raise ui.StepFailed(f"no snapshot named {args.name}")
        shutil.rmtree(path)
        return 0
    if args.what == "save":
        taken = snapshot.save(fabric.require(), path)
        ui.info(f"saved to {taken.path} in {taken.total_s:.1f} s ({taken.mb:.0f} MB); the guests "
                f"were stopped {taken.paused_ms} ms")
        return 0
    if not path.is_dir():
        raise ui.StepFailed(f"no snapshot named {args.name}")
    fabric.down(quiet=True)
    _, restored = snapshot.load(path)
    ui.info(f"{args.name} restored in {restored.total_s:.1f} s: the guests ran again after "
            f"{restored.loaded_s:.1f} s, every port ACTIVE {restored.active_s:.1f} s later")
    return fabric.status()


def _cmd_capture(args) -> int:
    from pibctl import monitor

    mode = "start" if args.start else "stop" if args.stop else "run"
    return monitor.capture(args.target, args.write, args.count, args.seconds, mode)


def _cmd_inspect(args) -> int:
    from pibctl import monitor

    return monitor.inspect(args.vm, args.object, args.json)


def _cmd_inject(args) -> int:
    from pibctl import monitor

    return monitor.inject(args.vm, args.injection)


def _cmd_exec(args) -> int:
    from pibctl import fabric

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise ui.StepFailed("usage: ./pib exec VM -- CMD [ARG...]")
    stdin = sys.stdin.buffer.read() if args.stdin else None
    result = fabric.exec_in(args.vm, argv, timeout=args.timeout, stdin=stdin)
    sys.stdout.buffer.write(result.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(result.stderr)
    sys.stderr.flush()
    if result.signal:
        return 128 + result.signal
    return result.exitcode


def _cmd_run(args) -> int:
    from pathlib import Path

    from pibctl import ci_run

    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise ui.StepFailed("usage: ./pib run [OPTIONS] -- COMMAND [ARG...]")
    commands = [ci_run.GuestCommand(args.vm, argv, args.vm)]
    for vm, script in args.also:
        if vm in (c.vm for c in commands):
            raise ui.StepFailed(f"--also {vm}: {vm} already runs a command")
        commands.append(ci_run.GuestCommand(vm, ["sh", "-c", script], vm))
    outcome = ci_run.run(_fabric_up_kwargs(args), commands, Path(args.logs).resolve(),
                         timeout=args.command_timeout, ignore_logs=args.ignore_logs,
                         grace=args.grace)
    print(ci_run.summary(outcome), flush=True)
    if args.junit:
        ci_run.write_junit(outcome, Path(args.junit))
    return ci_run.exit_status(outcome)


def _cmd_container(args) -> int:
    from pathlib import Path

    from pibctl import container

    tag = container.build(Path(args.output).resolve() if args.output else None)
    print(tag)
    return 0


def _cmd_console(args) -> int:
    from pibctl import console

    return console.attach(args.vm)


def _cmd_test(args) -> int:
    from pibctl import testing

    _choose_kernel(args)
    if args.peers:
        from pibctl import peers, setup

        setup.run()
        return peers.run(args.runs, [n.strip() for n in args.suites.split(",") if n.strip()],
                         [n.strip() for n in args.devices.split(",") if n.strip()], add=args.add)
    passes = [p for p in args.passes.split(",") if p] if args.passes else testing.PASSES
    chosen = testing.Selection(keyword=args.k, markers=args.m, last_failed=args.lf,
                               soaks=args.soak)
    return testing.run(chosen, unit=not args.e2e_only, e2e=not args.unit_only, vms=args.vms,
                       accel=_accel(args.accel), passes=passes, lanes=args.lanes, lane=args.lane,
                       trace=args.trace)


def _cmd_bench(args) -> int:
    from pibctl import bench, bench_scale, setup

    if args.scale:
        sizes = [int(s) for s in args.sizes.split(",")]
        engines = args.engines.split(",")
        bad = [s for s in sizes if s not in bench_scale.SIZES] + \
            [e for e in engines if e not in bench_scale.ENGINES]
        if bad:
            raise ui.StepFailed(f"--sizes of {', '.join(map(str, bench_scale.SIZES))}; --engines "
                                f"of {', '.join(bench_scale.ENGINES)}; not {bad}")
        # Set up first, as the other benchmarks do: a fabric that cannot
        # boot would otherwise fail every row, each replacing its last result.
        setup.run()
        return bench_scale.run(sizes, engines, _accel(args.accel))

    return bench.run(accel=args.accel, native_only=args.native_only, fabric_only=args.fabric)


def _cmd_fuzz(args) -> int:
    from pibctl import fuzzing

    known = list(fuzzing.TARGETS) + list(fuzzing.OTHER_TARGETS)
    targets = args.targets or [t for t in known if t != "fabric"]
    unknown = [t for t in targets if t not in known]
    if unknown:
        raise ui.StepFailed(f"unknown fuzz target {', '.join(unknown)}; targets: {', '.join(known)}")
    return fuzzing.run(minutes=args.minutes, targets=targets, jobs=args.jobs)


def _cmd_demo(args) -> int:
    from pibctl import demo

    return demo.run(vms=args.vms, accel=_accel(args.accel))


def _add_fabric_options(p, vms_default=2):
    p.add_argument("--vms", type=int, default=vms_default,
                   help=f"number of guests (default {vms_default or 2})")
    p.add_argument("--accel", choices=["tcg", "kvm", "auto"],
                   default=os.environ.get("PIB_ACCEL", "tcg"),
                   help="tcg (works everywhere), kvm (ordinary Linux hosts with /dev/kvm) or auto "
                        "(kvm when /dev/kvm is usable, else tcg); default $PIB_ACCEL or tcg")


def _add_kernel_option(p) -> None:
    from pibctl import sources

    p.add_argument("--kernel", choices=list(sources.GUEST_KERNELS), default=None,
                   help=f"the guests' kernel: {', '.join(f'{k} ({s})' for k, s in sources.GUEST_KERNELS.items())}; "
                        f"default {sources.DEFAULT_KERNEL}. The image is built for it; "
                        "the driver is also compile-checked against the others")


def _add_fabric_up_options(p) -> None:
    """What `fabric up` and `run` take to say which fabric to bring up."""
    from pibctl.fabric import CABLES

    _add_fabric_options(p, vms_default=None)
    p.add_argument("--memory", type=int, default=2048, help="MiB of RAM per guest (default 2048)")
    p.add_argument("--cpus", type=int, default=1, help="vCPUs per guest (default 1)")
    p.add_argument("--timeout", type=float, default=300, help="seconds to wait for the guests to boot")
    p.add_argument("--cable", choices=CABLES, default="ring",
                   help="how each HCA port reaches its switch: ring (shared memory, "
                        "the default) or stream (the socket's byte stream)")
    p.add_argument("--switches", type=int, default=None,
                   help="IB switches, chained; VMs are spread over them (default 1)")
    p.add_argument("--topology", metavar="FILE",
                   help="build the fabric a topology file describes instead "
                        "(see docs/user-guide.md and examples/)")
    p.add_argument("--simulate", metavar="SPEC",
                   help="the guests in a simulated fabric of thousands of switches and CAs "
                        "(one process): fat-tree:k=K,n=N, torus:XxYxZ[,hosts=H], "
                        "dragonfly:a=A,p=P,h=H, ibnetdiscover's output or a fabric file; the "
                        "guests take CA places spread over it (docs/user-guide.md, "
                        "\"Simulated fabrics\")")
    p.add_argument("--mlx5", metavar="VM[,VM...]", default="",
                   help="give these guests a ConnectX HCA (personality=mlx5, docs/mlx5.md) "
                        "that the unmodified mlx5_core, mlx5_ib and libmlx5 drive; what it lacks: "
                        "docs/mlx5.md §11")
    p.add_argument("--no-sm", action="store_true",
                   help="do not start opensm in vm1 (ports then stay INIT)")
    p.add_argument("--trace", default="", metavar="PATTERN",
                   help="QEMU trace events to enable: patterns, comma-separated, e.g. "
                        "'pib_hca_rc_*,pib_hca_link_*' (written to vmN/qemu.log)")
    p.add_argument("--kernel", metavar="BZIMAGE",
                   help="boot this kernel (say arch/x86/boot/bzImage of your tree) instead of "
                        "the bundled one; examples/own-kernel.config lists the options it needs")
    p.add_argument("--modules", metavar="DIR",
                   help="with --kernel: where `make modules_install INSTALL_MOD_PATH=DIR` put its "
                        "modules; our driver is built against the tree they link to")
    p.add_argument("--no-driver", action="store_true",
                   help="with --kernel: leave our driver out, to load your own")
    p.add_argument("--share", default="", metavar="DIR",
                   help="a host directory every guest mounts at the same path, read-write "
                        "(virtio-9p; a fabric that shares one cannot migrate or be saved)")
    p.add_argument("--boot", action="store_true",
                   help="boot the guests even when a snapshot of this fabric from an earlier "
                        "boot could restore it (docs/migration.md)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pib", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("setup", help="install host packages; build QEMU, our code and the guest image")
    p.add_argument("--no-image", action="store_true", help="skip the guest image")
    p.add_argument("--qemu-src", metavar="DIR",
                   help="build QEMU from your source tree DIR (applying ./pib qemu-patches if "
                        "hw/pib is not there yet) and run the guests with it from now on; "
                        "'pinned' goes back to the pinned QEMU 10.0.2")
    _add_kernel_option(p)
    p.set_defaults(func=_cmd_setup)

    p = sub.add_parser("package", help="build Debian packages for your own guests: pib-hca-dkms "
                                       "(the driver, built by DKMS) and the provider for "
                                       "rdma-core 56.1 and 65")
    p.add_argument("-o", "--output", default="pib-hca-packages", metavar="DIR",
                   help="where the .deb files go (default ./pib-hca-packages)")
    p.set_defaults(func=_cmd_package)

    p = sub.add_parser("qemu-patches", help="write qemu-hw/ as a patch series against upstream "
                                            "QEMU (git am or patch -p1 applies it)")
    p.add_argument("-o", "--output", default="pib-hca-qemu-patches", metavar="DIR",
                   help="where the .patch files go (default ./pib-hca-qemu-patches)")
    p.set_defaults(func=_cmd_qemu_patches)

    p = sub.add_parser("fabric", help="start, stop or inspect a fabric of guests")
    fsub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    up = fsub.add_parser("up", help="boot guests vm1..vmN in the background")
    _add_fabric_up_options(up)
    up.set_defaults(func=_cmd_fabric_up)
    fsub.add_parser("down", help="stop every process fabric up started").set_defaults(func=_cmd_fabric_down)
    status = fsub.add_parser("status", help="show the guests, whether they answer, and injected "
                             "faults")
    status.add_argument("--queues", action="store_true",
                        help="also each switch port's queues: bytes waiting for its stream and "
                             "rings, and which output holds its input back (docs/wire.md)")
    status.set_defaults(func=_cmd_fabric_status)
    fault = fsub.add_parser(
        "fault", help="inject faults into a switch port, or clear them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Injects faults into the packets crossing a switch port, in both directions "
                    "unless dir= says otherwise, replacing what the port had. Examples:\n"
                    "  ./pib fabric fault switch1:2 loss=5% corrupt=1% dup=1% reorder=2%\n"
                    "  ./pib fabric fault switch1:2 delay=1ms±1ms seed=7 dir=out\n"
                    "  ./pib fabric fault switch1:2 flap=500ms/10s\n"
                    "  ./pib fabric fault switch1:2 clear\n"
                    "In a simulated fabric, SWITCH:GUID:PORT is the end of a link inside it, on "
                    "port PORT of the simulated node GUID (dir=in: what that node receives there):\n"
                    "  ./pib fabric fault fabric:0x0002c90200000123:3 loss=1% corrupt=1%\n"
                    "What to inject: loss=P% loss-every=N burst=LEN/EVERY corrupt=P% dup=P% "
                    "reorder=P% window=N delay=T[±T] flap=DOWN/EVERY dir=in|out|both seed=N; "
                    "times in ns, us, ms or s. See docs/user-guide.md, \"Fault injection\".")
    fault.add_argument("port", metavar="SWITCH:PORT|SWITCH:GUID:PORT")
    fault.add_argument("spec", nargs="+", metavar="SPEC", help="what to inject, or clear")
    fault.set_defaults(func=_cmd_fabric_fault)
    migrate = fsub.add_parser(
        "migrate", help="live-migrate a guest to a new QEMU process on this host, its RDMA "
                        "traffic going on (docs/migration.md)")
    migrate.add_argument("vm", metavar="VM", help="the guest, say vm1")
    migrate.set_defaults(func=_cmd_fabric_migrate)
    snap = fsub.add_parser(
        "snapshot", help="save the whole fabric, guests and switches, or bring a saved one back "
                         "(docs/migration.md)",
        description="save NAME stops every guest, saves each switch's state and each guest "
                    "(its RAM and devices) into the cache's snapshots/NAME, and lets the guests "
                    "run on. load NAME takes the fabric that is up down and brings NAME's up "
                    "instead, every port ACTIVE as it was, RDMA traffic in flight going on. "
                    "list shows the snapshots; delete NAME removes one.")
    snap.add_argument("what", choices=("save", "load", "list", "delete"))
    snap.add_argument("name", nargs="?", default="", metavar="NAME")
    snap.set_defaults(func=_cmd_fabric_snapshot)

    p = sub.add_parser(
        "capture", help="record a switch or device port's packets to a pcap file for Wireshark",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Records every packet a port sends and receives, LRH to VCRC, to a pcap file "
                    "(InfiniBand in ERF records) that Wireshark and tshark read. Runs until "
                    "--seconds pass, --count packets were recorded, or Ctrl-C. Examples:\n"
                    "  ./pib capture switch1:1 -w sm-sweep.pcap --seconds 10\n"
                    "  ./pib capture vm2 --count 100\n"
                    "  ./pib capture vm1:1 -w rc.pcap --start   (then ... --stop)\n"
                    "See docs/user-guide.md, \"Packet capture\".")
    p.add_argument("target", metavar="SWITCH:PORT|vmN[:PORT]",
                   help="a switch port, or a VM's HCA port (port 1 by default)")
    p.add_argument("-w", "--write", default="", metavar="FILE",
                   help="the pcap file (default: TARGET.pcap here, ':' as '-')")
    p.add_argument("--count", type=int, default=0, help="stop after N packets")
    p.add_argument("--seconds", type=float, default=0, help="stop after S seconds")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--start", action="store_true", help="start the capture and return")
    mode.add_argument("--stop", action="store_true", help="stop a capture --start began")
    p.set_defaults(func=_cmd_capture)

    p = sub.add_parser(
        "inspect", help="show a VM's pib-hca state: ports, queues, QPs, MRs, counters",
        description="Shows what QEMU's `info pib` shows: the device's state, its ports and "
                    "counters, EQs, CQs, QPs, SRQs and MRs; or one object in detail (a QP's "
                    "PSNs, RC window and retry counters). See docs/user-guide.md, "
                    "\"Inspecting a device\".")
    p.add_argument("vm")
    p.add_argument("object", nargs="*", metavar="OBJECT N",
                   help="port N, eq N, cq N, qp N, srq N or mr KEY")
    p.add_argument("--json", action="store_true", help="the state as JSON (QMP x-pib-query)")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser(
        "inject", help="make a VM's pib-hca fail on purpose, to test a driver's error handling",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Arms a test facility of the device (QMP x-pib-inject), or does it at once. "
                    "Examples:\n"
                    "  ./pib inject vm1 command CREATE_QP NO_RESOURCES\n"
                    "  ./pib inject vm2 command CREATE_CQ NO_RES_ERR   (a ConnectX: its names, "
                    "docs/mlx5.md §4)\n"
                    "  ./pib inject vm1 wqe 17 REM_ACCESS_ERR 0x42\n"
                    "  ./pib inject vm1 drop 17 3        (or corrupt)\n"
                    "  ./pib inject vm1 event port-err 1\n"
                    "  ./pib inject vm1 stop cq 4        (then resume cq 4)\n"
                    "  ./pib inject vm1 fatal testing recovery\n"
                    "  ./pib inject vm1 clear\n"
                    "See docs/prm.md §10, \"Test facilities\".")
    p.add_argument("vm")
    p.add_argument("injection", nargs="+", metavar="WORD", help="the injection, in words")
    p.set_defaults(func=_cmd_inject)

    p = sub.add_parser("exec", help="run a command in a guest: ./pib exec VM -- CMD...")
    p.add_argument("vm")
    p.add_argument("--timeout", type=float, default=600, help="seconds before the command is killed")
    p.add_argument("--stdin", action="store_true", help="pass this command's stdin to the guest command")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_exec)

    p = sub.add_parser(
        "run", help="for CI: bring a fabric up, run a command in a guest, keep the logs, take the "
        "fabric down, exit with the command's status: ./pib run [OPTIONS] -- COMMAND",
        description="Brings a fabric up (restored from its snapshot when it has one), runs "
        "COMMAND in a guest and shows its output as it comes, keeps each guest's kernel log and "
        "console and each QEMU's and switch's log in --logs, takes the fabric down, and exits "
        "with COMMAND's status. A run whose command passed fails (status 1) when a guest kernel "
        "logged a warning or an Oops, or a device a guest error or FATAL, while it ran; 125 "
        "when the fabric did not come up. With --share DIR, COMMAND runs in DIR.")
    _add_fabric_up_options(p)
    p.add_argument("--vm", default="vm1", help="the guest COMMAND runs in (default vm1)")
    p.add_argument("--also", nargs=2, action="append", default=[], metavar=("VM", "SHELL_COMMAND"),
                   help="also run SHELL_COMMAND (sh -c) in VM, beside COMMAND; repeatable. "
                        "Each line of output then starts with its guest's name")
    p.add_argument("--grace", type=float, default=30, metavar="SECONDS",
                   help="how long the --also commands may run on once COMMAND has ended; then "
                        "they are stopped (SIGTERM: status 143) and fail the run (default 30)")
    p.add_argument("--command-timeout", type=float, default=3600, metavar="SECONDS",
                   help="kill the commands after this long (default 3600)")
    p.add_argument("--logs", default="pib-run-logs", metavar="DIR",
                   help="where the logs go, replaced each run (default ./pib-run-logs)")
    p.add_argument("--junit", default="", metavar="FILE",
                   help="also write a JUnit report: a test case per command, and one for the logs")
    p.add_argument("--ignore-logs", action="store_true",
                   help="pass on the commands' status alone, whatever the logs say")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser(
        "container", help="build a container image of pib-hca set up (Debian's packages only), "
        "for ./pib run on CI hosts of any Linux with podman or docker",
        description="Sets up as ./pib setup does, then builds the image localhost/pib-hca "
        "(tagged with the sources' hash and latest) with podman: debootstrap's bookworm, "
        "what running a fabric takes, this checkout, its QEMU, switch and guest image. "
        "./pib is its entry point: podman run --rm -v \"$PWD:$PWD\" localhost/pib-hca run "
        "--share \"$PWD\" -- make -C \"$PWD\" check. With /dev/kvm passed in "
        "(--device /dev/kvm) the guests run under KVM, else TCG.")
    p.add_argument("-o", "--output", default="", metavar="FILE",
                   help="also save the image to FILE, an archive podman load and docker load take")
    p.set_defaults(func=_cmd_container)

    p = sub.add_parser("console", help="attach to a guest's serial console (Ctrl-] leaves)")
    p.add_argument("vm")
    p.set_defaults(func=_cmd_console)

    p = sub.add_parser("test", help="set up if needed, then run every unit and end-to-end test")
    p.add_argument("-k", default="", metavar="EXPRESSION",
                   help="only end-to-end tests whose names match, as pytest -k takes it: a "
                        "substring, or substrings joined by and, or, not ('ipoib and not cm')")
    p.add_argument("-m", default="", metavar="EXPRESSION",
                   help="only end-to-end tests whose markers match, as pytest -m takes it "
                        "(tests/e2e/pytest.ini lists them: 'not errors_on_purpose')")
    p.add_argument("--lf", action="store_true",
                   help="only the end-to-end tests that failed in each pass's last run "
                        "(pytest --lf); a pass with none runs nothing")
    p.add_argument("--unit-only", action="store_true", help="skip the end-to-end tests")
    p.add_argument("--e2e-only", action="store_true", help="skip the unit tests")
    p.add_argument("--peers", action="store_true",
                   help="instead: other projects' own test suites (osmtest, rdma-core's tests, "
                        "fabtests, UCX's gtest) on pib-hca, ConnectX and Soft-RoCE guests, --runs "
                        "times each; writes their table into docs/peers.md")
    p.add_argument("--runs", type=int, default=10, metavar="N",
                   help="with --peers: runs of each suite on each device (default 10)")
    p.add_argument("--add", action="store_true",
                   help="with --peers: add the runs to those the table holds of these suites and "
                        "devices instead of replacing them (a campaign run in parts); each run "
                        "names its commit")
    p.add_argument("--suites", default="", metavar="SUITE[,SUITE...]",
                   help="with --peers: only these suites ('osmtest', 'rdma-core tests', "
                        "'fabtests', 'UCX gtest'); the table keeps the others' last results")
    p.add_argument("--devices", default="", metavar="DEVICE[,DEVICE...]",
                   help="with --peers: only on these devices ('pib-hca', 'ConnectX', "
                        "'Soft-RoCE'); the table keeps the others' last results")
    p.add_argument("--soak", action="store_true",
                   help="also the soaks: end-to-end tests that run a minute or more to find "
                        "leaks and stalls (a link flapping under traffic for a minute)")
    p.add_argument("--pass", dest="passes", default="", metavar="PASS[,PASS...]",
                   help="only these end-to-end passes, each on a fabric of its own: main, "
                        "two-switches, hostile, connectx, own-kernel, simulated (default: "
                        "all)")
    p.add_argument("--lanes", type=int, choices=[1, 2], default=0,
                   help="fabrics tested at once: 2 runs the connectx and two-switches passes "
                        "beside the others, each lane on a run directory of its own; 1 runs "
                        "the passes one after another (default: 2 on a host of 4 CPUs or more, "
                        "else 1)")
    p.add_argument("--trace", default="", metavar="PATTERN[,PATTERN...]",
                   help="more of QEMU's trace events (as -trace takes them: pib_hca_cqe_written, "
                        "pib_hca_rc_*) in the qemu.log of every test fabric's guests, beside the "
                        "RC timer's events they always have, to see what led to a failure")
    # A child of ./pib test running one of its other lanes (test_lanes.py).
    p.add_argument("--lane", default="1", help=argparse.SUPPRESS)
    _add_kernel_option(p)
    _add_fabric_options(p)
    p.set_defaults(func=_cmd_test)

    p = sub.add_parser("bench", help="benchmark the data path: the core alone, then perftest "
                                     "between guests over pib-hca and over Soft-RoCE, then "
                                     "UCX and an MPI ping-pong over pib-hca, then perftest "
                                     "and UCX on the ConnectX personality")
    p.add_argument("--native-only", action="store_true",
                   help="only the native benchmark of the device core (no guests)")
    p.add_argument("--fabric", action="store_true",
                   help="only the native benchmark and the fabric benchmark: two device "
                        "processes through one, then two switch processes, then 1, 2, 4 and 8 "
                        "pairs through one switch process (on its loop alone, then with 2 "
                        "forwarding threads) and through a switch each (no guests)")
    p.add_argument("--accel", choices=["tcg", "kvm"], default="tcg",
                   help="tcg (default) or kvm, for the guests")
    p.add_argument("--scale", action="store_true",
                   help="opensm in a guest against simulated fat trees (and, for "
                        "torus-2QoS, 3-D tori of 8 VLs) of 1,000 to 10,000 nodes: sweep, "
                        "routing and SUBNET UP times per routing engine, and the switch "
                        "process's memory and CPU; writes docs/scale.md's table")
    p.add_argument("--sizes", default="1000,5000,10000",
                   help="with --scale: the fabrics' sizes in nodes (of 1000, 5000, 10000)")
    p.add_argument("--engines", default="minhop,updn,ftree,dfsssp,torus-2QoS",
                   help="with --scale: opensm's routing engines")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("fuzz", help="run the libFuzzer harnesses (device core, switch, packet "
                                    "parsers) with ASan and UBSan, corpus kept in the cache")
    p.add_argument("--minutes", type=float, default=10,
                   help="minutes per target (default 10)")
    p.add_argument("--jobs", type=int, default=1,
                   help="fuzzing processes per libFuzzer target at once (default 1)")
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="core, mlx5, switch, sim-fabric, switch-tcp, packet, state, switch-state (libFuzzer, for --minutes each), qtest "
                        "(1,000,000 random accesses to the built QEMU) or fabric (random "
                        "input into a booted fabric's ports, --minutes each); default: all "
                        "but fabric, in turn")
    p.set_defaults(func=_cmd_fuzz)

    p = sub.add_parser("demo", help="set up, boot the default fabric and show what works")
    _add_fabric_options(p)
    p.set_defaults(func=_cmd_demo)
    return parser


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def main(argv) -> int:
    args = build_parser().parse_args(argv)
    # Every compiler ./pib runs keeps its ccache in the cache too.
    os.environ.setdefault("CCACHE_DIR", str(paths.cache_dir() / "ccache"))
    # A stopped run (CI's time limit, kill) unwinds like ^C: its fabric goes
    # down in the finally blocks instead of being left behind.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return args.func(args)
    except ui.StepFailed as e:
        print(f"pib: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pib: interrupted", file=sys.stderr)
        return 130
