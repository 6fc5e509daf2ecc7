#!/usr/bin/env python3
"""Facts of docs/ that the code states, kept true by computing them.

The component table of docs/architecture.md ends each row with the lines
of the files it names (qemu-hw/core/src; `x.*` and `a*.{hh,cc}` are
globs). Without arguments this rewrites those numbers; with --check it
fails when one is out of date (`./pib test` runs the check).
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
CORE = ROOT / "qemu-hw" / "core" / "src"
ROW = re.compile(r"^(\| [^|]+ \| )([^|]+)( \| [^|]+ \| )(\d+)( \|)$", re.M)


def _expand(pattern: str) -> list:
    braces = re.fullmatch(r"(.*)\{(.*)\}", pattern)
    if braces:
        return [f for alt in braces.group(2).split(",") for f in _expand(braces.group(1) + alt)]
    found = sorted(CORE.glob(pattern))
    if not found:
        raise SystemExit(f"docs/architecture.md names {pattern}, which matches no file in {CORE}")
    return found


def lines_of(files_cell: str) -> int:
    files = {f for name in re.findall(r"`([^`]+)`", files_cell) for f in _expand(name)}
    return sum(len(f.read_text().splitlines()) for f in files)


def updated(text: str) -> str:
    return ROW.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{lines_of(m.group(2))}{m.group(5)}",
                   text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a fact is out of date")
    args = parser.parse_args()
    text = DOC.read_text()
    new = updated(text)
    if args.check:
        if new != text:
            print("docs/architecture.md: the line counts are out of date; run tools/doc_facts.py")
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
