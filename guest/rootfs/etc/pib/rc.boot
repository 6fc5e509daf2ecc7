#!/bin/bash
# One-time boot of a pib-hca guest. Identity comes from the kernel command
# line that ./pib fabric up writes:
#   pibvm.name=vm2 pibvm.index=2 pibvm.vms=4 pibvm.net=10.77.0 pibvm.ibnet=10.78.0
set -u
# init starts this with the kernel's bare PATH: our tools live in /usr/local.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for word in $(cat /proc/cmdline); do
    case "$word" in
    pibvm.name=*) name=${word#*=} ;;
    pibvm.index=*) index=${word#*=} ;;
    pibvm.vms=*) vms=${word#*=} ;;
    pibvm.net=*) net=${word#*=} ;;
    pibvm.ibnet=*) ibnet=${word#*=} ;;
    esac
done
name=${name:-pib-guest}
index=${index:-1}
vms=${vms:-1}
net=${net:-10.77.0}
ibnet=${ibnet:-10.78.0}

hostname "$name"
echo "$name" >/etc/hostname
{
    echo "127.0.0.1 localhost"
    for i in $(seq 1 "$vms"); do
        echo "$net.$i vm$i"
        echo "$ibnet.$i vm$i-ib"
    done
} >/etc/hosts

ip link set lo up
modprobe virtio_pci
modprobe virtio_console
modprobe virtio_net
# Free pages reported to QEMU, which drops them: the freed initramfs among
# them, so that a snapshot or a live move does not carry it.
modprobe virtio_balloon 2>/dev/null
for dev in /sys/class/net/*; do
    dev=${dev##*/}
    [ "$dev" = lo ] && continue
    [ "$(cat /sys/class/net/$dev/type)" = 1 ] || continue
    ip addr add "$net.$index/24" dev "$dev"
    ip link set "$dev" up
    break
done

# ssh between the guests (MPI's launchers use it): the keys ./pib fabric up
# made for this guest come through QEMU's fw_cfg (tools/pibctl/guest_ssh.py).
modprobe qemu_fw_cfg 2>/dev/null
keys=/sys/firmware/qemu_fw_cfg/by_name/opt/pib/ssh/raw
if [ -r "$keys" ] && tar -x -C / -f "$keys"; then
    mkdir -p /run/sshd
    /usr/sbin/sshd
else
    echo "pib-guest: no ssh keys from the host (fw_cfg opt/pib/ssh); sshd not started"
fi

# The adapter's driver: pib-hca's own, or with personality=mlx5 (a
# Mellanox vendor ID) the kernel's ConnectX drivers.
hca=pib
for vendor in /sys/bus/pci/devices/*/vendor; do
    [ "$(cat "$vendor")" = 0x15b3 ] && hca="mlx5_core mlx5_ib"
done
for m in ib_core ib_uverbs ib_umad ib_ipoib rdma_ucm $hca; do
    modprobe "$m"
done

# IPoIB on port 1 (datagram mode): the address is set now, the broadcast
# group is joined by ib_ipoib once the SM has made the port ACTIVE.
pib-ipoib-up || true

echo "pib-guest: $name is up"
