"""./pib setup: everything a fresh Debian 12 host needs, cached and idempotent."""

import time

from pibctl import core_build, hostdeps, image, qemu_build, ui


def run(skip_image: bool = False) -> None:
    start = time.monotonic()
    hostdeps.ensure()
    core_build.build()
    qemu_build.build()
    if not skip_image:
        image.build()
    ui.info(f"setup complete in {time.monotonic() - start:.0f} s")
