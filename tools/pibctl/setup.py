"""./pib setup: everything a fresh Debian 12 host needs, cached and idempotent."""

import time

from pibctl import core_build, hostdeps, image, paths, qemu_build, ui


def run(skip_image: bool = False) -> None:
    start = time.monotonic()
    hostdeps.ensure()
    beside = None if skip_image else image.BaseBeside.start()
    try:
        core_build.build()
        qemu_build.build()
        link_binaries()
        if not skip_image:
            image.build(beside)
    finally:
        if beside:
            beside.stop()
    ui.info(f"setup complete in {time.monotonic() - start:.0f} s")


def link_binaries() -> None:
    """$PIB_CACHE/bin: the QEMU and switch this checkout built, under
    names that stay put for a user's own command lines."""
    bin_dir = paths.cache_dir() / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for target in (paths.qemu_binary(), paths.fabric_switch_binary()):
        link = bin_dir / target.name
        tmp = bin_dir / f".{target.name}.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        tmp.rename(link)
