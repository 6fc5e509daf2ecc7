"""Content-addressed copies of the sources our meson builds read.

A meson build directory belongs to the source tree it was configured for.
If that were the checkout, two checkouts would take the cache's build
directories from each other, and a second clone of the same commit would
rebuild everything. So each build reads a copy of the sources it needs,
made once per content: trees/<key>/src, with its build directories beside
it in trees/<key>/build/<variant>. A checkout of the same content finds
the tree built; one of other content gets a tree of its own and leaves the
others alone. ccache (with the relative paths this layout gives every
tree) makes a tree for an edited checkout cost only what the edit changed.
"""

import functools
import hashlib
import os
import shutil
import time
from pathlib import Path

from pibctl import paths

# What the build and its tests read (meson.build files, sources, the docs
# test_docs checks, the formatting and generated-file checks).
INPUTS = (".clang-format", "meson.build", "meson_options.txt", "README.md", "docs", "include",
          "common", "qemu-hw", "fabric-switch", "guest-driver", "guest-provider",
          "guest/traffic", "guest/mpi", "guest/common", "tests/unit", "tests/bench",
          "tests/fuzz", "tests/fuzz/inputs/state", "tests/fuzz/inputs/switch-state",
          "tests/check_format.sh",
          "tools/gen_events.py", "tools/doc_facts.py", "tools/unity_sources.py",
          "tools/personality_includes.py")
# Read from the checkout at run time, never built: left out of the key
# (but the state fuzzers' seeds, which unit tests compare with what the
# device and the switch save).
NOT_INPUTS = ("tests/fuzz/inputs",)
# Copied into the tree, but left out of its key: results that campaigns
# write as they go (./pib test --peers, ./pib bench --scale), so that a
# campaign's next run finds the tree its first one built. Nothing built
# reads them (doc_facts only checks that they exist).
NOT_KEYED = ("docs/peers-results.json", "docs/peers.md", "docs/scale-results.json",
             "docs/scale.md")
# Trees kept besides the current one; older ones are removed.
KEEP = 3


def _files(root: Path):
    """The input files under `root`, relative, sorted."""
    found = []
    for name in INPUTS:
        top = root / name
        if top.is_file():
            found.append(Path(name))
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            rel_dir = Path(dirpath).relative_to(root)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__"
                                 and str(rel_dir / d) not in NOT_INPUTS)
            found.extend(rel_dir / f for f in filenames)
    return sorted(found)


@functools.lru_cache(maxsize=None)
def key(root: Path = paths.REPO) -> str:
    """The hash of the inputs' names, modes and contents."""
    h = hashlib.sha256()
    for rel in _files(root):
        if str(rel) in NOT_KEYED:
            continue
        path = root / rel
        h.update(f"{rel}\0{os.access(path, os.X_OK)}\0".encode())
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]


def trees_dir() -> Path:
    return paths.cache_dir() / "trees"


def tree_dir(root: Path = paths.REPO) -> Path:
    return trees_dir() / key(root)


def src_dir(root: Path = paths.REPO) -> Path:
    return tree_dir(root) / "src"


def build_dir(variant: str, root: Path = paths.REPO) -> Path:
    return tree_dir(root) / "build" / variant


def ensure(root: Path = paths.REPO) -> Path:
    """The copy of `root`'s inputs, made if missing; marks the tree used."""
    tree = tree_dir(root)
    src = tree / "src"
    if not src.is_dir():
        tmp = tree / "src.tmp"
        if tmp.exists():
            shutil.rmtree(tmp)
        for rel in _files(root):
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, tmp / rel)
        tmp.rename(src)
    (tree / "used").write_text(f"{time.time()}\n")
    _prune(keep=tree)
    return src


def _prune(keep: Path) -> None:
    """Removes all but the KEEP most recently used trees (and `keep`)."""
    def used(tree: Path) -> float:
        try:
            return float((tree / "used").read_text())
        except (OSError, ValueError):
            return 0.0
    trees = sorted((t for t in trees_dir().iterdir() if t.is_dir() and t != keep),
                   key=used, reverse=True)
    for old in trees[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def ccache_env(env=None) -> dict:
    """The environment for a build in a tree: ccache sees every tree's
    paths as the same relative ones, so an unchanged file is a hit."""
    env = dict(env if env is not None else os.environ)
    env["CCACHE_BASEDIR"] = str(trees_dir())
    env["CCACHE_NOHASHDIR"] = "1"
    env.setdefault("CCACHE_MAXSIZE", "2G")
    return env
