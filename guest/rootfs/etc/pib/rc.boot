#!/bin/bash
# One-time boot of a pib-hca guest. Identity comes from the kernel command
# line that ./pib fabric up writes:
#   pibvm.name=vm2 pibvm.index=2 pibvm.vms=4 pibvm.net=10.77.0
set -u
for word in $(cat /proc/cmdline); do
    case "$word" in
    pibvm.name=*) name=${word#*=} ;;
    pibvm.index=*) index=${word#*=} ;;
    pibvm.vms=*) vms=${word#*=} ;;
    pibvm.net=*) net=${word#*=} ;;
    esac
done
name=${name:-pib-guest}
index=${index:-1}
vms=${vms:-1}
net=${net:-10.77.0}

hostname "$name"
echo "$name" >/etc/hostname
{
    echo "127.0.0.1 localhost"
    for i in $(seq 1 "$vms"); do
        echo "$net.$i vm$i"
    done
} >/etc/hosts

ip link set lo up
modprobe virtio_net
for dev in /sys/class/net/*; do
    dev=${dev##*/}
    [ "$dev" = lo ] && continue
    [ "$(cat /sys/class/net/$dev/type)" = 1 ] || continue
    ip addr add "$net.$index/24" dev "$dev"
    ip link set "$dev" up
    break
done

for m in ib_core ib_uverbs ib_umad ib_ipoib rdma_ucm pib; do
    modprobe "$m"
done

echo "pib-guest: $name is up"
