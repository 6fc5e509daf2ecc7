"""Cache keys: a step is redone only when the hash of its inputs changes."""

import hashlib
from pathlib import Path

from pibctl import paths


def hash_files(files, extra: str = "") -> str:
    """Hash of the named files' paths (relative to the repo) and contents."""
    h = hashlib.sha256(extra.encode())
    for f in sorted(Path(f) for f in files):
        try:
            rel = f.relative_to(paths.REPO)
        except ValueError:
            rel = f
        h.update(str(rel).encode() + b"\0")
        h.update(f.read_bytes() if f.is_file() else b"<missing>")
        h.update(b"\0")
    return h.hexdigest()


def hash_tree(root: Path, extra: str = "", suffixes=None) -> str:
    files = [p for p in Path(root).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    if suffixes:
        files = [p for p in files if p.suffix in suffixes or p.name in suffixes]
    return hash_files(files, extra)


def _stamp(name: str) -> Path:
    return paths.cache_dir() / "stamps" / name


def is_current(name: str, key: str) -> bool:
    stamp = _stamp(name)
    return stamp.is_file() and stamp.read_text().strip() == key


def mark(name: str, key: str) -> None:
    stamp = _stamp(name)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(key + "\n")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
