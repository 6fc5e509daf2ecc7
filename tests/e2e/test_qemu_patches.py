"""./pib qemu-patches: the series applies to pristine upstream QEMU with
git am and with patch -p1, and what it adds is exactly the hw/pib this
checkout builds (the QEMU the guests run was built from it: ./pib setup
applies the same series to the pinned tarball; ./pib test also builds it
into the newest QEMU in Debian's archives). Host-only."""

import subprocess
import tempfile
from pathlib import Path

from pibctl import qemu_patches, sources


def _pristine(tmp: Path, tarball: Path) -> Path:
    """The upstream files the series edits, in a git tree of their own."""
    top = subprocess.run(["tar", "-tf", tarball], capture_output=True, text=True,
                         check=True).stdout.split("\n", 1)[0].split("/")[0]
    subprocess.run(["tar", "-xf", tarball, "-C", tmp,
                    *[f"{top}/{p}" for p in qemu_patches._touched()]], check=True)
    return tmp / top


def _run(tree: Path, *argv):
    proc = subprocess.run(argv, cwd=tree, capture_output=True, text=True)
    assert proc.returncode == 0, f"{' '.join(argv)}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout


def test_the_series_applies_with_git_am_and_holds_our_hw_pib(ctx):
    tarball = sources.fetch(sources.QEMU)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        series = qemu_patches.write_series(tarball, tmp / "series")
        assert [p.name[:5] for p in series] == ["0001-", "0002-"], series
        tree = _pristine(tmp, tarball)
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
        _run(tree, *git, "init", "-q")
        _run(tree, *git, "add", "-A")
        _run(tree, *git, "commit", "-qm", "upstream")
        _run(tree, *git, "am", "-q", *map(str, series))
        log = _run(tree, "git", "log", "--format=%s", "-3").splitlines()
        assert log[0].startswith("hw/pib: monitor commands") and log[1].startswith(
            "hw/pib: add pib-hca"), log
        for rel, ours in qemu_patches.layout().items():
            assert (tree / rel).read_bytes() == ours.read_bytes(), rel
        for edit in qemu_patches.DEVICE_EDITS + qemu_patches.MONITOR_EDITS:
            assert edit.text in (tree / edit.path).read_text(), edit.path
        # Each patch is whole: after the first, hw/pib builds without the
        # monitor's source, which needs the second's QAPI schema.
        _run(tree, "git", "checkout", "-q", "HEAD~1")
        first = (tree / "hw/pib/meson.build").read_text()
        assert qemu_patches.MONITOR_SOURCE not in first and not (tree / "qapi/pib.json").exists()


def test_the_series_applies_with_patch_p1(ctx):
    tarball = sources.fetch(sources.QEMU)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        series = qemu_patches.write_series(tarball, tmp / "series")
        tree = _pristine(tmp, tarball)
        for patch in series:
            out = _run(tree, "patch", "-p1", "--forward", "--batch", "-i", str(patch))
            assert "offset" not in out and "fuzz" not in out, out
        assert qemu_patches.is_applied(tree)
