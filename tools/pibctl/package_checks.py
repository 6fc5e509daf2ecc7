"""./pib package's packages where no guest is needed (./pib test's host
checks): the DKMS driver package and the provider package install with
apt into a fresh stock Debian root (package_root.py: trixie, DKMS, the
stock kernel's headers, trixie's rdma-core), where DKMS builds pib.ko and
the provider resolves against that rdma-core; and the rdma-core 65
provider resolves against Debian's libibverbs1 65. The provider package
installed in a guest is tests/e2e/test_packages.py."""

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from pibctl import buildroot, package, package_root, provider_build, ui

PACKAGES = ["pib-hca-dkms", "pib-hca-provider-rdmav34", "pib-hca-provider-rdmav65"]


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ui.StepFailed(what)


def _in(root: Path, *argv) -> str:
    """argv's output inside `root`; it must succeed."""
    proc = buildroot.output_in(root, argv)
    _require(proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def symbols(library: Path, defined: bool) -> set:
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


def build(out: Path) -> dict:
    """./pib package's output in `out`: package name -> .deb."""
    debs = {deb.name.split("_")[0]: deb for deb in package.build_all(out)}
    _require(sorted(debs) == PACKAGES, f"./pib package made {sorted(debs)}, not {PACKAGES}")
    return debs


def dkms_builds_the_driver_and_the_provider_resolves(debs: dict) -> None:
    """In a fresh copy of the stock root: apt installs both packages, DKMS
    builds pib.ko for the stock kernel, the provider's libibverbs symbols
    resolve, and purging the package removes the module."""
    package_root.ensure()
    with tempfile.TemporaryDirectory(dir=package_root.root().parent) as tmp:
        root = package_root.fresh_copy(Path(tmp) / "root")
        release = package_root.kernel_release(root)
        (root / "tmp" / "debs").mkdir(parents=True)
        for name in ("pib-hca-dkms", "pib-hca-provider-rdmav34"):
            shutil.copy2(debs[name], root / "tmp" / "debs")
        installed = _in(root, "sh", "-c", "apt-get install -y /tmp/debs/*.deb")
        status = _in(root, "dkms", "status")
        _require(re.search(rf"^pib-hca/{package.version()}, {re.escape(release)}, x86_64: "
                           "installed", status, re.M) is not None, status + installed)
        ko = next((root / "lib" / "modules" / release / "updates" / "dkms").glob("pib.ko*"),
                  None)
        _require(ko is not None, f"DKMS installed no pib.ko for {release}:\n{installed}")
        vermagic = _in(root, "modinfo", "-F", "vermagic", f"/{ko.relative_to(root)}")
        _require(vermagic.startswith(release + " "), vermagic)
        library = f"/{package.PROVIDER_DIR}/{provider_build.GUEST.library}"
        resolved = _in(root, "ldd", "-r", library)
        _require("libibverbs.so.1 =>" in resolved
                 and not re.search(r"undefined symbol|not found", resolved), resolved)
        needed = symbols(root / library.lstrip("/"), defined=False)
        offered = symbols(root / "usr/lib/x86_64-linux-gnu/libibverbs.so.1", defined=True)
        _require(("verbs_register_driver_34", "IBVERBS_PRIVATE_34") in needed, str(sorted(needed)))
        _require(needed <= offered, f"not offered: {sorted(needed - offered)}")
        driver_file = _in(root, "cat", f"/{package.DRIVER_FILE}").strip()
        _require(driver_file == "driver pib", driver_file)
        # Removing the package removes the module DKMS built.
        _in(root, "apt-get", "purge", "-y", "pib-hca-dkms")
        left = list((root / "lib" / "modules" / release).rglob("pib.ko*"))
        _require(not left, f"left after the purge: {left}")
        _require("pib-hca" not in _in(root, "dkms", "status"), "dkms still lists pib-hca")


def rdma_core_65_provider_resolves(debs: dict) -> None:
    """Every libibverbs symbol the rdma-core 65 provider imports, at its
    version (IBVERBS_PRIVATE_65 for the private ABI), Debian's libibverbs1
    65 exports; and the package depends on that version."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for deb in (debs["pib-hca-provider-rdmav65"], package_root.libibverbs_65()):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp)], check=True)
        library = tmp / package.PROVIDER_DIR / provider_build.NEWEST.library
        needed = symbols(library, defined=False)
        offered = symbols(tmp / "usr/lib/x86_64-linux-gnu/libibverbs.so.1", defined=True)
        _require(("verbs_register_driver_65", "IBVERBS_PRIVATE_65") in needed, str(sorted(needed)))
        _require(len(offered) > 100, f"libibverbs1 65 exports only {sorted(offered)}")
        _require(needed <= offered, f"not offered: {sorted(needed - offered)}")
        control = subprocess.run(["dpkg-deb", "-f", str(debs["pib-hca-provider-rdmav65"]),
                                  "Depends"], capture_output=True, text=True).stdout
        _require("libibverbs1 (>= 65.0)" in control, control)
