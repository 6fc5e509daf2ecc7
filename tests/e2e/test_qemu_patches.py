"""./pib qemu-patches: the series applies to pristine upstream QEMU with
git am and with patch -p1, and what it adds is exactly the hw/pib this
checkout builds (the QEMU the guests run was built from it: ./pib setup
applies the same series to the pinned tarball; ./pib test also builds it
into the newest QEMU in Debian's archives). Host-only."""

import os
import subprocess
import tempfile
from pathlib import Path

from pibctl import paths, qemu_build, qemu_patches, source_tree, sources, ui


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
        tree = qemu_patches.pristine(tarball, tmp)
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
        tree = qemu_patches.pristine(tarball, tmp)
        for patch in series:
            out = _run(tree, "patch", "-p1", "--forward", "--batch", "-i", str(patch))
            assert "offset" not in out and "fuzz" not in out, out
        assert qemu_patches.is_applied(tree)


def test_setup_qemu_src_chooses_a_tree_until_pinned(ctx):
    """./pib setup --qemu-src: a QEMU tree is remembered and its build is
    the QEMU the guests run, until `pinned`; what is not a QEMU tree is
    refused. (In a cache of its own: the fabric that is up is left alone.)"""
    saved = os.environ.get("PIB_CACHE")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ["PIB_CACHE"] = str(tmp)
        try:
            assert qemu_build.selected() == qemu_build.PINNED
            pinned = tmp / "trees" / source_tree.key() / "qemu-system-x86_64"
            assert paths.qemu_binary() == pinned
            (tmp / "not-qemu").mkdir()
            try:
                qemu_build.choose(str(tmp / "not-qemu"))
            except ui.StepFailed as e:
                assert "not a QEMU source tree" in str(e), str(e)
            else:
                raise AssertionError("a directory without configure was taken for QEMU")
            tree = tmp / "src" / "qemu"
            (tree / "hw").mkdir(parents=True)
            (tree / "configure").write_text("#!/bin/sh\n")
            qemu_build.choose(str(tree))
            chosen = qemu_build.selected()
            assert chosen.src == tree and chosen.tarball is None
            assert paths.qemu_binary() == chosen.binary == tmp / "qemu-own/build/qemu-system-x86_64"
            qemu_build.choose(qemu_build.PINNED_WORD)
            assert qemu_build.selected() == qemu_build.PINNED
            assert paths.qemu_binary() == pinned
        finally:
            if saved is None:
                os.environ.pop("PIB_CACHE", None)
            else:
                os.environ["PIB_CACHE"] = saved
