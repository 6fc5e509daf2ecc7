"""ssh between the guests, as MPI's launchers need it (mpirun starts its
daemons on the other guests with ssh): keys made for each fabric when it
comes up, none in the image.

Each guest gets, through QEMU's fw_cfg (opt/pib/ssh, a tar archive that
/etc/pib/rc.boot unpacks before it starts sshd):
  - its own host key, and a known_hosts naming every guest's, so that no
    guest trusts a key it was not given;
  - root's key pair, the same in every guest of the fabric, and it in
    authorized_keys, so that root logs in from any guest to any other.
"""

import io
import subprocess
import tarfile
from pathlib import Path

from pibctl import ui

FW_CFG_NAME = "opt/pib/ssh"


def _keygen(path: Path, comment: str) -> None:
    try:
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
                        "-f", str(path)], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise ui.StepFailed(f"ssh-keygen (openssh-client) could not make {path}: {e}") from None


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.uid, info.gid = len(data), mode, 0, 0
    tar.addfile(info, io.BytesIO(data))


def _add_dir(tar: tarfile.TarFile, name: str, mode: int) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, mode, 0, 0
    tar.addfile(info)


def make(run_dir: Path, vms, names_of) -> None:
    """Writes each VM's archive (archive(vm)) under run_dir/ssh. `vms` are
    the fabric's VMs, `names_of(vm)` the names and addresses a guest may
    use for one (vm2, vm2-ib, 10.77.0.2, ...)."""
    keys = run_dir / "ssh"
    keys.mkdir(mode=0o700)
    _keygen(keys / "root", "root@pib-fabric")
    for vm in vms:
        _keygen(keys / f"host-{vm.name}", vm.name)
    known = "".join(f"{','.join(names_of(vm))} "
                    f"{' '.join((keys / f'host-{vm.name}.pub').read_text().split()[:2])}\n"
                    for vm in vms)
    root_private = (keys / "root").read_bytes()
    root_public = (keys / "root.pub").read_bytes()
    for vm in vms:
        with tarfile.open(archive(run_dir, vm), "w") as tar:
            _add_dir(tar, "root/.ssh", 0o700)
            _add(tar, "root/.ssh/id_ed25519", root_private, 0o600)
            _add(tar, "root/.ssh/id_ed25519.pub", root_public, 0o644)
            _add(tar, "root/.ssh/authorized_keys", root_public, 0o600)
            _add(tar, "root/.ssh/known_hosts", known.encode(), 0o644)
            _add(tar, "etc/ssh/ssh_host_ed25519_key",
                 (keys / f"host-{vm.name}").read_bytes(), 0o600)
            _add(tar, "etc/ssh/ssh_host_ed25519_key.pub",
                 (keys / f"host-{vm.name}.pub").read_bytes(), 0o644)


def archive(run_dir: Path, vm) -> Path:
    return run_dir / "ssh" / f"{vm.name}.tar"


def qemu_args(run_dir: Path, vm) -> list:
    return ["-fw_cfg", f"name={FW_CFG_NAME},file={archive(run_dir, vm)}"]
