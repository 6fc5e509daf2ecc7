"""MPI jobs across the guests, for the tests: pib-mpi-check (guest/mpi/)
started from vm1 by Open MPI's mpirun or MPICH's mpiexec, which reach the
other guests over ssh. Each run checks every byte it moves; the HCA
ports' counters show that the bytes between guests crossed the fabric."""

import random
import re

from transfers import xmit_bytes

# Open MPI's transports as a user selects them.
OPENMPI_PML = {
    "ucx": ["--mca", "pml", "ucx"],
    # The OFI MTL over libfabric's RDM endpoints on verbs (ofi_rxm). Debian
    # turns the OFI MTL off in openmpi-mca-params.conf; the option wins.
    "ofi": ["--mca", "pml", "cm", "--mca", "mtl", "ofi",
            "--mca", "mtl_ofi_provider_include", "verbs;ofi_rxm"],
}
# What one rank sends each other rank in pib-mpi-check's point-to-point part.
MESSAGE_BYTES = sum([1, 7, 64, 1000, 4096, 4097, 65536, 200000, 1 << 20, 3000001, 4 << 20])


def _command(mpi, ranks, hosts, transport, program_args, env):
    spread = ",".join(f"{h}:{ranks // len(hosts)}" for h in hosts)
    names, values = [kv.split("=", 1)[0] for kv in env], [kv.split("=", 1)[1] for kv in env]
    if mpi == "openmpi":
        exported = [x for kv in env for x in ("-x", kv)]
        return ["mpirun", "-np", str(ranks), "--host", spread, *OPENMPI_PML[transport],
                *exported, "pib-mpi-check.openmpi", *program_args]
    assert transport == "ucx", "Debian's MPICH is built for UCX only (ch4:ucx)"
    exported = [x for name, value in zip(names, values) for x in ("-genv", name, value)]
    return ["mpiexec.mpich", "-n", str(ranks), "-hosts", spread, *exported,
            "pib-mpi-check.mpich", *program_args]


def mpi_check(ctx, mpi, ranks, transport, hosts=("vm1", "vm2"), timeout=300, device="pib_0",
              env=()):
    """Runs pib-mpi-check with `ranks` ranks spread evenly over `hosts`
    (whose HCA is `device`), with `env` (NAME=VALUE strings) in every
    rank; it must report every byte equal, and each host's port must have
    sent at least what each rank sends the others. Prints its summary."""
    seed = random.getrandbits(48)
    argv = _command(mpi, ranks, hosts, transport, ["--seed", str(seed)], env)
    before = {vm: xmit_bytes(ctx, vm, device) for vm in hosts}
    result = ctx.run("vm1", ["timeout", str(timeout), *argv], timeout=timeout + 30, check=False)
    after = {vm: xmit_bytes(ctx, vm, device) for vm in hosts}
    where = f"{' '.join(argv)}: exit {result.exitcode}\n{result.out}{result.err}"
    assert result.exitcode == 0, where
    assert "every byte checked, all equal" in result.out, where
    placed = re.search(r"^ranks: (.*)$", result.out, re.M)
    assert placed and all(f"@{h}" in placed.group(1) for h in hosts), where
    for vm in hosts:
        assert after[vm] - before[vm] >= MESSAGE_BYTES, (
            f"{vm}'s HCA sent {after[vm] - before[vm]} bytes, less than one rank's "
            f"messages ({MESSAGE_BYTES}): the ranks did not talk over InfiniBand\n{where}")
    summary = re.search(r"^pib-mpi-check: .*$", result.out, re.M).group(0)
    library = re.search(r"^library: (.*)$", result.out, re.M)
    name = " ".join(library.group(1).replace(",", " ").replace("Version:", "").split()[:3])
    print(f"{name} over {transport}, {ranks} ranks on "
          f"{'+'.join(hosts)}: {summary.split(': ', 1)[1]}; "
          f"{', '.join(f'{vm} sent {(after[vm] - before[vm]) / 1e6:.1f} MB' for vm in hosts)}")
    return result.out
