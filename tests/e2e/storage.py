"""The kernel's RDMA storage protocols between two guests, as the storage
tests drive them: NVMe over Fabrics (nvmet-rdma exporting a RAM disk,
`nvme connect -t rdma`), NFS over RDMA (an NFSv4.2 export of a tmpfs
mounted with proto=rdma) and SRP (LIO's ib_srpt, the kernel's ib_srp).
Which guest is the initiator and which the target is the caller's
(Roles): test_storage runs them between two pib-hca guests,
test_connectx both ways between a pib-hca and a ConnectX. Random data is
written, read back over the fabric and compared by SHA-256 at both ends.
"""

import re
import time
from dataclasses import dataclass

from pibctl import fabric
from pibctl.pairs import ipoib_up

NQN = "nqn.2026-11.org.pib-hca:ramdisk"
HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:6b1f3a52-0d8e-4c1b-9a53-7f0c2d4e8a61"
CONFIGFS_TARGET = "/sys/kernel/config/target"


@dataclass(frozen=True)
class Roles:
    """The initiator (NVMe host, NFS client, SRP initiator) and the target
    (NVMe target, NFS server, SRP target) of a storage test."""
    host: str = "vm1"
    target: str = "vm2"

    @property
    def vms(self):
        return (self.host, self.target)

    @property
    def target_ip(self):
        """The target's IPoIB address (vmN-ib), which NVMe-oF and NFS listen on."""
        return f"{fabric.IPOIB_NET}.{int(self.target[2:])}"


def mb_per_s(dd_output):
    """GNU dd's rate line: '... copied, 1.2 s, 27.9 MB/s'."""
    m = re.search(r"([\d.]+) ([kMG]B)/s", dd_output)
    assert m, dd_output
    return float(m.group(1)) * {"kB": 1e-3, "MB": 1, "GB": 1e3}[m.group(2)]


def _device(ctx, vm):
    """The guest's HCA: pib_0, or mlx5_0 on a ConnectX guest."""
    return ctx.fabric.vm(vm).device


def disk_roundtrip(ctx, roles, dev, megabytes):
    """Random data through the host's block device `dev` (backed by the
    target's RAM disk) in 1 MiB direct I/Os, each fast-registered by the
    initiator, read back, compared on the host and against the target's
    RAM disk. Returns the write and read rates in MB/s."""
    host = roles.host
    write = ctx.sh(host, f"head -c {megabytes}M /dev/urandom > /tmp/disk.in && "
                         f"dd if=/tmp/disk.in of={dev} bs=1M oflag=direct 2>&1", timeout=300).out
    read = ctx.sh(host, f"dd if={dev} of=/tmp/disk.out bs=1M count={megabytes} iflag=direct 2>&1",
                  timeout=300).out
    sums = ctx.sh(host, "sha256sum /tmp/disk.in /tmp/disk.out").out.split()
    ctx.sh(host, "rm -f /tmp/disk.in /tmp/disk.out")
    assert sums[0] == sums[2], f"read back differs from what was written\n{sums}"
    target = ctx.sh(roles.target, f"head -c {megabytes}M /dev/ram0 | sha256sum").out.split()[0]
    assert target == sums[0], f"the target's RAM disk differs from what {host} wrote"
    return mb_per_s(write), mb_per_s(read)


# NVMe over Fabrics.

def _nvmet_target(ctx, roles):
    """The target exports a 64 MiB RAM disk as namespace 1 of NQN on port 4420."""
    ctx.sh(roles.target, f"""
        set -e
        modprobe brd rd_nr=1 rd_size=65536
        modprobe nvmet-rdma
        mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
        cd /sys/kernel/config/nvmet
        mkdir -p subsystems/{NQN}/namespaces/1 ports/1
        echo 1 > subsystems/{NQN}/attr_allow_any_host
        echo /dev/ram0 > subsystems/{NQN}/namespaces/1/device_path
        echo 1 > subsystems/{NQN}/namespaces/1/enable
        echo rdma > ports/1/addr_trtype
        echo ipv4 > ports/1/addr_adrfam
        echo {roles.target_ip} > ports/1/addr_traddr
        echo 4420 > ports/1/addr_trsvcid
        ln -sfn /sys/kernel/config/nvmet/subsystems/{NQN} ports/1/subsystems/{NQN}
    """)


def _nvmet_teardown(ctx, roles):
    ctx.sh(roles.target, f"""
        cd /sys/kernel/config/nvmet 2>/dev/null || exit 0
        rm -f ports/1/subsystems/{NQN}
        rmdir ports/1 2>/dev/null
        echo 0 > subsystems/{NQN}/namespaces/1/enable 2>/dev/null
        rmdir subsystems/{NQN}/namespaces/1 subsystems/{NQN} 2>/dev/null
        modprobe -r nvmet-rdma nvmet brd 2>/dev/null
        true
    """, check=False)


NAMESPACE_SECONDS = 60


def nvme_device(ctx, roles):
    """The block device of the connected controller's namespace: with the
    kernel's native multipath, /dev/nvmeXnY (the head), not nvmeXcZnY.
    `nvme connect` returns once the controller is live; the kernel scans
    its namespaces afterwards (nvme_scan_work), so the head may appear a
    moment later: wait for it, bounded."""
    host = roles.host
    deadline = time.monotonic() + NAMESPACE_SECONDS
    while True:
        heads = [n for n in ctx.run(host, ["ls", "/sys/block"]).out.split()
                 if re.fullmatch(r"nvme\d+n\d+", n)]
        ours = [n for n in heads
                if ctx.sh(host, f"cat /sys/block/{n}/device/subsysnqn 2>/dev/null; true"
                          ).out.strip() == NQN]
        if ours or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(ours) == 1, ctx.sh(host, "ls -l /sys/block /sys/class/nvme*; nvme list; true").out
    return "/dev/" + ours[0]


def nvme_roundtrip(ctx, roles, megabytes):
    """disk_roundtrip through the namespace (each 1 MiB I/O a fast
    registration of 256 pages), then 4 KiB blocks at scattered offsets.
    Returns the write and read rates in MB/s."""
    dev = nvme_device(ctx, roles)
    rates = disk_roundtrip(ctx, roles, dev, megabytes)
    small = ctx.sh(roles.host, f"""
        set -e
        for off in 3 517 4095 8190; do
            head -c 4096 /dev/urandom > /tmp/blk
            dd if=/tmp/blk of={dev} bs=4096 seek=$off oflag=direct status=none
            dd if={dev} of=/tmp/blk.back bs=4096 skip=$off count=1 iflag=direct status=none
            cmp /tmp/blk /tmp/blk.back
        done
        echo small-ok
    """, timeout=120).out
    assert "small-ok" in small, small
    ctx.sh(roles.host, "rm -f /tmp/blk /tmp/blk.back")
    return rates


class NvmeConnected:
    """The target exports the RAM disk; the host is connected to it over RDMA."""

    def __init__(self, ctx, roles=Roles()):
        self.ctx = ctx
        self.roles = roles

    def __enter__(self):
        ipoib_up(self.ctx, self.roles.vms)
        _nvmet_target(self.ctx, self.roles)
        self.ctx.sh(self.roles.host,
                    f"modprobe nvme-rdma && nvme connect -t rdma -a {self.roles.target_ip} "
                    f"-s 4420 -n {NQN} --hostnqn={HOSTNQN}", timeout=120)
        return self

    def __exit__(self, *exc):
        self.ctx.sh(self.roles.host, f"nvme disconnect -n {NQN}", check=False, timeout=120)
        _nvmet_teardown(self.ctx, self.roles)
        # The controller is gone on both sides.
        left = self.ctx.sh(self.roles.host, "ls /sys/class/nvme 2>/dev/null; true").out
        assert exc[0] is not None or "nvme" not in left, left


# NFS over RDMA.

def _nfs_server(ctx, roles):
    """The target exports a tmpfs over NFSv4 on RDMA port 20049. nfsdcld
    keeps the clients' records, so that a server with none to reclaim
    skips the grace period (the kernel says so) instead of making the
    first OPEN wait; a grace period there is lasts 10 s, not 90."""
    ctx.sh(roles.target, """
        set -e
        modprobe nfsd && modprobe rpcrdma
        mountpoint -q /proc/fs/nfsd || mount -t nfsd nfsd /proc/fs/nfsd
        mkdir -p /srv/pib /var/lib/nfs/nfsdcld /run/rpc_pipefs
        # nfsdcld talks to the kernel through rpc_pipefs where nfs.conf
        # says; a legacy recovery directory would be chosen over it.
        mountpoint -q /run/rpc_pipefs || mount -t rpc_pipefs sunrpc /run/rpc_pipefs
        rmdir /var/lib/nfs/v4recovery 2>/dev/null || true
        mountpoint -q /srv/pib || mount -t tmpfs -o size=96m tmpfs /srv/pib
        echo '/srv/pib *(rw,no_root_squash,insecure,fsid=1,no_subtree_check)' > /etc/exports
        pidof rpcbind >/dev/null || rpcbind -w
        pidof rpc.mountd >/dev/null || rpc.mountd
        pidof nfsdcld >/dev/null || nfsdcld
        # nfsd gives nfsdcld half a second to open the pipe it makes, so it
        # starts once nfsdcld watches for that pipe (its inotify descriptor).
        for i in $(seq 100); do
            ls -l /proc/$(pidof nfsdcld)/fd 2>/dev/null | grep -q inotify && break
            sleep 0.1
        done
        exportfs -ra
        if [ "$(cat /proc/fs/nfsd/threads)" = 0 ]; then
            echo 10 > /proc/fs/nfsd/nfsv4leasetime
            echo 10 > /proc/fs/nfsd/nfsv4gracetime
            rpc.nfsd -N 3 4
        fi
        grep -q rdma /proc/fs/nfsd/portlist || echo 'rdma 20049' > /proc/fs/nfsd/portlist
    """, timeout=120)


def _nfs_teardown(ctx, roles):
    ctx.sh(roles.host, "umount /mnt/pib 2>/dev/null; true", check=False, timeout=60)
    ctx.sh(roles.target, "rpc.nfsd 0; exportfs -ua; umount /srv/pib; true", check=False,
           timeout=60)


def nfs_roundtrip(ctx, roles, files, megabytes):
    """Files of random data written with an fsync each, read back over the
    fabric after the client's cache is dropped, compared on the client
    and on the server. Returns the mean write and read rates in MB/s."""
    host = roles.host
    write = ctx.sh(host, f"""
        set -e
        for i in $(seq 1 {files}); do
            head -c {megabytes}M /dev/urandom > /tmp/nfs.$i
            dd if=/tmp/nfs.$i of=/mnt/pib/file.$i bs=1M conv=fsync 2>&1 | tail -1
        done
    """, timeout=600).out
    read = ctx.sh(host, f"""
        set -e
        echo 3 > /proc/sys/vm/drop_caches
        for i in $(seq 1 {files}); do
            dd if=/mnt/pib/file.$i of=/tmp/nfs.back.$i bs=1M 2>&1 | tail -1
        done
    """, timeout=600).out
    sums = ctx.sh(host, f"cd /tmp && for i in $(seq 1 {files}); do "
                        f"sha256sum nfs.$i nfs.back.$i; done").out.split()
    on_server = ctx.sh(roles.target, f"cd /srv/pib && for i in $(seq 1 {files}); do "
                                     f"sha256sum file.$i; done").out.split()
    for i in range(files):
        sent, back, stored = sums[4 * i], sums[4 * i + 2], on_server[2 * i]
        assert sent == back, f"file {i + 1} read back differs\n{sums}"
        assert sent == stored, f"file {i + 1} differs on the server\n{on_server}"
    ctx.sh(host, "rm -f /tmp/nfs.* /mnt/pib/file.*")
    rates = [mb_per_s(line) for line in write.splitlines() if "/s" in line]
    read_rates = [mb_per_s(line) for line in read.splitlines() if "/s" in line]
    assert len(rates) == len(read_rates) == files, (write, read)
    return sum(rates) / files, sum(read_rates) / files


class NfsMounted:
    """The target exports a tmpfs; the host has it mounted over RDMA at /mnt/pib."""

    def __init__(self, ctx, roles=Roles()):
        self.ctx = ctx
        self.roles = roles

    def __enter__(self):
        ipoib_up(self.ctx, self.roles.vms)
        _nfs_server(self.ctx, self.roles)
        self.ctx.sh(self.roles.host,
                    f"modprobe nfsv4 && modprobe rpcrdma && mkdir -p /mnt/pib && "
                    f"mount -t nfs -o vers=4.2,proto=rdma,port=20049 "
                    f"{self.roles.target_ip}:/srv/pib /mnt/pib", timeout=120)
        mounts = self.ctx.sh(self.roles.host, "grep ' /mnt/pib ' /proc/mounts").out
        assert "proto=rdma" in mounts, mounts
        return self

    def __exit__(self, *exc):
        self.ctx.sh(self.roles.host, "rm -f /tmp/nfs.*", check=False)
        _nfs_teardown(self.ctx, self.roles)


# SRP.

def _gid_hex(ctx, vm):
    """Port 1's GID as 32 hex digits: fe80000000000000<port GUID>."""
    gid = ctx.run(vm, ["cat", f"/sys/class/infiniband/{_device(ctx, vm)}/ports/1/gids/0"]).out
    return gid.strip().replace(":", "")


def srp_service_guid(ctx, roles):
    """What ib_srpt serves as: its IOC GUID, identifier extension and IB CM
    service ID. By default ib_srpt takes the HCA's node GUID, but
    pib-hca's are locally administered EUI-64s (first byte 0x02), a range
    ib_cm keeps for service IDs it assigns itself (its listen fails with
    EINVAL): the first byte is cleared (hardware GUIDs from an IEEE OUI
    start with 0x00)."""
    guid = ctx.run(roles.target, ["cat", f"/sys/class/infiniband/{_device(ctx, roles.target)}"
                                         "/node_guid"]).out
    return "00" + guid.strip().replace(":", "")[2:]


def _srp_target(ctx, roles):
    """The target exports a 64 MiB RAM disk through LIO's ib_srpt on its
    port 1, to the host's port 1 (an ACL for ib_srp's initiator port ID:
    identifier extension 0, then the port GUID)."""
    wwn = "0x" + _gid_hex(ctx, roles.target)
    initiator = "0x" + "0" * 16 + _gid_hex(ctx, roles.host)[16:]
    ctx.sh(roles.target, f"""
        set -e
        modprobe brd rd_nr=1 rd_size=65536
        modprobe target_core_iblock
        modprobe ib_srpt srpt_service_guid=0x{srp_service_guid(ctx, roles)}
        mountpoint -q /sys/kernel/config || mount -t configfs configfs /sys/kernel/config
        cd {CONFIGFS_TARGET}
        mkdir -p core/iblock_0/ram0
        echo udev_path=/dev/ram0 > core/iblock_0/ram0/control
        echo 1 > core/iblock_0/ram0/enable
        mkdir -p srpt/{wwn}/tpgt_1/lun/lun_0
        ln -s {CONFIGFS_TARGET}/core/iblock_0/ram0 srpt/{wwn}/tpgt_1/lun/lun_0/ram0
        mkdir -p srpt/{wwn}/tpgt_1/acls/{initiator}/lun_0
        ln -s {CONFIGFS_TARGET}/srpt/{wwn}/tpgt_1/lun/lun_0 \\
            srpt/{wwn}/tpgt_1/acls/{initiator}/lun_0/lun_0
        echo 1 > srpt/{wwn}/tpgt_1/enable
    """, timeout=120)
    return wwn, initiator


def _srp_target_teardown(ctx, roles, wwn, initiator):
    ctx.sh(roles.target, f"""
        cd {CONFIGFS_TARGET}/srpt/{wwn} 2>/dev/null || exit 0
        echo 0 > tpgt_1/enable
        rm -f tpgt_1/acls/{initiator}/lun_0/lun_0
        rmdir tpgt_1/acls/{initiator}/lun_0 tpgt_1/acls/{initiator}
        rm -f tpgt_1/lun/lun_0/ram0
        rmdir tpgt_1/lun/lun_0 tpgt_1 && cd .. && rmdir {wwn}
        cd {CONFIGFS_TARGET}/core && echo 0 > iblock_0/ram0/enable 2>/dev/null
        rmdir iblock_0/ram0 iblock_0 2>/dev/null
        modprobe -r ib_srpt target_core_iblock target_core_mod brd 2>/dev/null
        true
    """, check=False, timeout=120)


def _srp_disk(ctx, roles):
    """The SCSI disk of the host's SRP initiator: /dev/sdX."""
    found = ctx.sh(roles.host, """
        for i in $(seq 1 100); do
            for disk in /sys/block/sd*; do
                [ -e "$disk/device" ] || continue
                host=$(readlink -f "$disk/device" | grep -o 'host[0-9]*' | head -1)
                if [ "$(cat /sys/class/scsi_host/$host/proc_name 2>/dev/null)" = ib_srp ]; then
                    echo "/dev/${disk##*/}"; exit 0
                fi
            done
            sleep 0.2
        done
        exit 1
    """, timeout=60, check=False)
    assert found.exitcode == 0, ctx.sh(roles.host, "ls -l /sys/block /sys/class/scsi_host; "
                                                   "dmesg | tail -20; true").out
    return found.out.strip()


class SrpDisk:
    """The target exports its RAM disk through ib_srpt; the host's ib_srp
    logs in to it over the IB CM (to the service srp_service_guid names)
    and sees a SCSI disk, whose name `with` gives."""

    def __init__(self, ctx, roles=Roles()):
        self.ctx = ctx
        self.roles = roles
        self.target = None

    def __enter__(self):
        ctx, roles = self.ctx, self.roles
        self.target = _srp_target(ctx, roles)
        guid = srp_service_guid(ctx, roles)
        try:
            ctx.sh(roles.host, f"""
                set -e
                modprobe sd_mod
                modprobe ib_srp
                echo id_ext={guid},ioc_guid={guid},dgid={_gid_hex(ctx, roles.target)},pkey=ffff,service_id={guid} \\
                    > /sys/class/infiniband_srp/srp-{_device(ctx, roles.host)}-1/add_target
            """, timeout=120)
            return _srp_disk(ctx, roles)
        except BaseException as e:
            self.__exit__(type(e), e, e.__traceback__)
            raise

    def __exit__(self, *exc):
        self.ctx.sh(self.roles.host, "for p in /sys/class/srp_remote_ports/port-*; do "
                                     "[ -e $p/delete ] && echo 1 > $p/delete; done; "
                                     "modprobe -r ib_srp; true", check=False, timeout=120)
        if self.target:
            _srp_target_teardown(self.ctx, self.roles, *self.target)
        left = self.ctx.sh(self.roles.host, "ls /sys/class/srp_remote_ports 2>/dev/null; true").out
        assert exc[0] is not None or "port-" not in left, left
