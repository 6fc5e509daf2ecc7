"""pib-traffic, the guest program that moves random data between guests
and checks every byte (guest/traffic/): built on the host against the
rdma-core tree the provider is built in, and OpenSSL for SHA-256."""

from pathlib import Path

from pibctl import paths, provider_build, stamps, ui

SOURCE_DIR = paths.REPO / "guest" / "traffic"
CFLAGS = ["-std=gnu11", "-O2", "-g", "-Wall", "-Wextra", "-Werror", "-pthread"]


def binary() -> Path:
    return paths.cache_dir() / "traffic" / "pib-traffic"


def build() -> Path:
    """Builds pib-traffic (once per change of its sources); returns its path."""
    rdma = provider_build.build_dir()
    sources = sorted(SOURCE_DIR.glob("*.c"))
    key = stamps.hash_files([*sources, *SOURCE_DIR.glob("*.h"), *paths.GUEST_COMMON.glob("*.h")],
                            " ".join(CFLAGS))
    out = binary()
    if stamps.is_current("traffic", key) and out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    ui.run_logged(["gcc", *CFLAGS, f"-I{rdma / 'include'}", f"-I{paths.GUEST_COMMON}", *sources,
                   "-o", out, f"-L{rdma / 'lib'}", "-libverbs", "-lcrypto"], "traffic", "gcc (pib-traffic)")
    stamps.mark("traffic", key)
    ui.detail(f"pib-traffic: {out}")
    return out
