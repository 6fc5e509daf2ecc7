"""pib-mpi-check, the guests' MPI program (guest/mpi/): built on the host
once for each MPI of the guest image, Open MPI and MPICH, whose ABIs
differ. The headers and libraries come from the image's own packages
(paths.mpi_sdk_dir(), which image.py fills): the libraries are only linked
against, so what they need from a newer C library than the host's is left
to the guest's."""

from pibctl import paths, stamps, ui

SOURCE_DIR = paths.REPO / "guest" / "mpi"
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror"]
# MPI -> (include directory inside the SDK's root, library to link).
MPIS = {
    "openmpi": ("usr/lib/x86_64-linux-gnu/openmpi/include", "libmpi.so.40"),
    "mpich": ("usr/lib/x86_64-linux-gnu/mpich/include", "libmpich.so.12"),
}
LIBRARIES = [lib for _, lib in MPIS.values()]


def binaries():
    return [paths.cache_dir() / "mpi" / f"pib-mpi-check.{mpi}" for mpi in MPIS]


def build():
    """Builds pib-mpi-check.openmpi and pib-mpi-check.mpich (once per
    change of the sources or of the image's MPIs); returns their paths."""
    sdk = paths.mpi_sdk_dir()
    sources = sorted(SOURCE_DIR.glob("*.c"))
    libraries = [sdk / "lib" / lib for lib in LIBRARIES]
    headers = sorted(paths.GUEST_COMMON.glob("*.h"))
    key = stamps.hash_files([*sources, *headers, *libraries], " ".join(CFLAGS))
    outs = binaries()
    if stamps.is_current("mpi-programs", key) and all(out.is_file() for out in outs):
        return outs
    outs[0].parent.mkdir(parents=True, exist_ok=True)
    for (mpi, (include, lib)), out in zip(MPIS.items(), outs):
        ui.run_logged(["gcc", *CFLAGS, f"-I{sdk / 'root' / include}",
                       f"-I{paths.GUEST_COMMON}", *sources,
                       sdk / "lib" / lib, "-Wl,--allow-shlib-undefined", "-o", out],
                      "mpi", f"gcc ({out.name})")
    stamps.mark("mpi-programs", key)
    ui.detail(f"pib-mpi-check for Open MPI and MPICH: {outs[0].parent}")
    return outs
