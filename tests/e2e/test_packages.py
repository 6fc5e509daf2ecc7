"""./pib package's provider package installed in a guest makes libibverbs
list the device. The packages in a stock Debian root (DKMS, the provider
against trixie's and Debian's rdma-core 65) need no guest: ./pib test's
host checks (tools/pibctl/package_checks.py)."""

import tempfile
from pathlib import Path

from pibctl import package, provider_build


def test_the_provider_package_installed_in_a_guest_serves_the_device(ctx):
    with tempfile.TemporaryDirectory(prefix="pib-packages-") as out:
        deb = package.provider_package(provider_build.GUEST, Path(out))
        ctx.run("vm1", ["sh", "-c", "cat > /tmp/provider.deb"], stdin=deb.read_bytes())
    ctx.run("vm1", ["dpkg", "-i", "/tmp/provider.deb"])
    listed = ctx.run("vm1", ["dpkg", "-L", "pib-hca-provider-rdmav34"]).out
    assert f"/{package.PROVIDER_DIR}/{provider_build.GUEST.library}" in listed, listed
    assert "pib_0" in ctx.run("vm1", ["ibv_devices"]).out
    info = ctx.run("vm1", ["ibv_devinfo", "-d", "pib_0"]).out
    assert "PORT_ACTIVE" in info, info
