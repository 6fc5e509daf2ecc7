"""./pib package: the DKMS driver package and the provider packages install
with apt into a fresh stock Debian root (package_root.py: trixie, DKMS,
the stock kernel's headers, trixie's rdma-core), where DKMS builds pib.ko
and the provider resolves against that rdma-core; the provider package
installed in a guest makes libibverbs list the device."""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pibctl import buildroot, package, package_root, provider_build

_debs = {}


def _packages() -> dict:
    """./pib package's output, built once per run: package name -> .deb."""
    if not _debs:
        out = Path(tempfile.mkdtemp(prefix="pib-packages-"))
        for deb in package.build_all(out):
            _debs[deb.name.split("_")[0]] = deb
    return _debs


def _in(root: Path, *argv, ok=True) -> str:
    proc = buildroot.output_in(root, argv)
    if ok:
        assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


def _symbols(library: Path, defined: bool) -> set:
    """libibverbs' versioned symbols a library imports (or exports):
    {(name, version)}, from its dynamic symbol table."""
    table = subprocess.run(["objdump", "-T", str(library)], capture_output=True, text=True,
                           check=True).stdout
    found = set()
    for line in table.splitlines():
        m = re.search(r"\s(\*UND\*|\.text)\s+\S+\s+(?:\()?(IBVERBS_[\w.]+)\)?\s+(\w+)$", line)
        if m and (m.group(1) != "*UND*") == defined:
            found.add((m.group(3), m.group(2)))
    return found


def test_dkms_builds_the_driver_and_the_provider_resolves_in_a_stock_root(ctx):
    debs = _packages()
    assert sorted(debs) == ["pib-hca-dkms", "pib-hca-provider-rdmav34",
                            "pib-hca-provider-rdmav65"], sorted(debs)
    package_root.ensure()
    with tempfile.TemporaryDirectory(dir=package_root.root().parent) as tmp:
        root = package_root.fresh_copy(Path(tmp) / "root")
        release = package_root.kernel_release(root)
        (root / "tmp" / "debs").mkdir(parents=True)
        for name in ("pib-hca-dkms", "pib-hca-provider-rdmav34"):
            shutil.copy2(debs[name], root / "tmp" / "debs")
        installed = _in(root, "sh", "-c", "apt-get install -y /tmp/debs/*.deb")
        status = _in(root, "dkms", "status")
        assert re.search(rf"^pib-hca/{package.version()}, {re.escape(release)}, x86_64: installed",
                         status, re.M), status + installed
        ko = next((root / "lib" / "modules" / release / "updates" / "dkms").glob("pib.ko*"))
        vermagic = _in(root, "modinfo", "-F", "vermagic", f"/{ko.relative_to(root)}")
        assert vermagic.startswith(release + " "), vermagic
        library = f"/{package.PROVIDER_DIR}/{provider_build.GUEST.library}"
        resolved = _in(root, "ldd", "-r", library)
        assert "libibverbs.so.1 =>" in resolved and not re.search(
            r"undefined symbol|not found", resolved), resolved
        needed = _symbols(root / library.lstrip("/"), defined=False)
        offered = _symbols(root / "usr/lib/x86_64-linux-gnu/libibverbs.so.1", defined=True)
        assert ("verbs_register_driver_34", "IBVERBS_PRIVATE_34") in needed, sorted(needed)
        assert needed <= offered, sorted(needed - offered)
        assert _in(root, "cat", f"/{package.DRIVER_FILE}").strip() == "driver pib"
        # Removing the package removes the module DKMS built.
        _in(root, "apt-get", "purge", "-y", "pib-hca-dkms")
        assert not list((root / "lib" / "modules" / release).rglob("pib.ko*"))
        assert "pib-hca" not in _in(root, "dkms", "status")


def test_the_rdma_core_65_provider_resolves_against_debian_s_libibverbs_65(ctx):
    debs = _packages()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for deb in (debs["pib-hca-provider-rdmav65"], package_root.libibverbs_65()):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
        library = tmp / package.PROVIDER_DIR / provider_build.NEWEST.library
        # Every libibverbs symbol the provider imports, at its version
        # (IBVERBS_PRIVATE_65 for the private ABI), that library exports.
        needed = _symbols(library, defined=False)
        offered = _symbols(tmp / "usr/lib/x86_64-linux-gnu/libibverbs.so.1", defined=True)
        assert ("verbs_register_driver_65", "IBVERBS_PRIVATE_65") in needed, sorted(needed)
        assert len(offered) > 100, sorted(offered)
        assert needed <= offered, sorted(needed - offered)
        control = subprocess.run(["dpkg-deb", "-f", str(debs["pib-hca-provider-rdmav65"]),
                                  "Depends"], capture_output=True, text=True).stdout
        assert "libibverbs1 (>= 65.0)" in control, control


def test_the_provider_package_installed_in_a_guest_serves_the_device(ctx):
    deb = _packages()["pib-hca-provider-rdmav34"]
    ctx.run("vm1", ["sh", "-c", "cat > /tmp/provider.deb"], stdin=deb.read_bytes())
    ctx.run("vm1", ["dpkg", "-i", "/tmp/provider.deb"])
    listed = ctx.run("vm1", ["dpkg", "-L", "pib-hca-provider-rdmav34"]).out
    assert f"/{package.PROVIDER_DIR}/{provider_build.GUEST.library}" in listed, listed
    assert "pib_0" in ctx.run("vm1", ["ibv_devices"]).out
    info = ctx.run("vm1", ["ibv_devinfo", "-d", "pib_0"]).out
    assert "PORT_ACTIVE" in info, info
