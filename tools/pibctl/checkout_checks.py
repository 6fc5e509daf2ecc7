"""The cache is shared by every checkout (source_tree.py): a second
checkout of the same content reuses every build, and one of other content
builds apart without touching this checkout's builds. ./pib test runs
these checks on copies of this checkout."""

import os
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from pibctl import core_build, paths, setup, source_tree, ui

# ./pib setup in a second checkout of the same content may take this much
# CPU time (its own and its children's): on an idle machine its wall time
# is about the same, but ./pib test runs this check at the idle CPU
# priority beside booting guests, where the wall time says how busy they
# were, not how much work setup did.
SECOND_SETUP_S = 60


def _copy_checkout(dest: Path) -> Path:
    shutil.copytree(paths.REPO, dest, symlinks=True,
                    ignore=shutil.ignore_patterns(".git", "__pycache__"))
    return dest


def _setup(checkout: Path) -> str:
    """./pib setup --no-image in `checkout`, with this run's cache."""
    proc = subprocess.run([str(checkout / "pib"), "setup", "--no-image"], capture_output=True,
                          text=True, errors="replace", timeout=1800, env=dict(os.environ))
    if proc.returncode != 0:
        raise ui.StepFailed(f"./pib setup in {checkout} exited {proc.returncode}:\n"
                            f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc.stdout + proc.stderr


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _builds() -> dict:
    """This checkout's build outputs and their modification times."""
    outputs = [paths.qemu_binary(), *(paths.core_build_dir() / target
                                      for target in core_build.SWITCH_TARGETS)]
    missing = [str(p) for p in outputs if not p.is_file()]
    if missing:
        raise ui.StepFailed("not built: " + ", ".join(missing))
    return {p: p.stat().st_mtime_ns for p in outputs}


def same_content_reuses_everything() -> None:
    before = _builds()
    with tempfile.TemporaryDirectory(prefix="pib-checkout-") as tmp:
        copy = _copy_checkout(Path(tmp) / "pib-hca")
        if source_tree.key(copy) != source_tree.key():
            raise ui.StepFailed("a copy of the checkout hashes to another source tree")
        start, cpu_start = time.monotonic(), _children_cpu()
        out = _setup(copy)
        took, cpu = time.monotonic() - start, _children_cpu() - cpu_start
    setup.link_binaries()
    changed = [str(p) for p, mtime in before.items() if p.stat().st_mtime_ns != mtime]
    if changed or "Compiling" in out or cpu > SECOND_SETUP_S:
        raise ui.StepFailed(f"./pib setup in a second checkout took {cpu:.0f} s of CPU "
                            f"(at most {SECOND_SETUP_S}), rebuilt {changed or 'nothing'}:\n"
                            + out[-2000:])
    ui.detail(f"./pib setup in a second checkout of the same content: {took:.1f} s "
              f"({cpu:.1f} s of CPU), nothing rebuilt")


def other_content_builds_apart() -> None:
    before = _builds()
    with tempfile.TemporaryDirectory(prefix="pib-checkout-") as tmp:
        copy = _copy_checkout(Path(tmp) / "pib-hca")
        edited = copy / "qemu-hw" / "core" / "src" / "ports.cc"
        edited.write_text(edited.read_text() + "// another checkout's edit\n")
        other = source_tree.tree_dir(copy)
        if other == source_tree.tree_dir():
            raise ui.StepFailed("an edited copy of the checkout hashes to the same source tree")
        shutil.rmtree(other, ignore_errors=True)  # built by an earlier run: build it again
        start = time.monotonic()
        _setup(copy)
        took = time.monotonic() - start
    setup.link_binaries()
    if not (other / "qemu-system-x86_64").is_file() or not (other / "build" / "pib").is_dir():
        raise ui.StepFailed(f"the edited checkout's builds are not in {other}")
    changed = [str(p) for p, mtime in before.items() if p.stat().st_mtime_ns != mtime]
    if changed:
        raise ui.StepFailed("a checkout of other content changed this one's builds: "
                            + ", ".join(changed))
    ports = Path("qemu-hw/core/src/ports.cc")
    if (source_tree.src_dir() / ports).read_text() != (paths.REPO / ports).read_text():
        raise ui.StepFailed("this checkout's source tree took the other checkout's edit")
    ui.detail(f"./pib setup in a checkout with one file edited: {took:.0f} s, in {other.name}")
