#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Checks that the device core's personalities stay in their folders
(docs/architecture.md): in qemu-hw/core, only the composition root
(src/device.cc) and the generated error conditions (src/conditions.hh,
which name ConnectX's statuses) include a header of src/pib/ or
src/mlx5/, and neither personality includes the other's. Exits 1 naming
each include that breaks the rule."""

import re
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "qemu-hw" / "core"
PERSONALITIES = ("pib", "mlx5")
ROOTS = {"src/device.cc", "src/conditions.hh"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path: Path) -> str:
    """The personality whose folder holds `path`, or "" for the shared core."""
    parts = path.relative_to(CORE / "src").parts if (CORE / "src") in path.parents else ()
    return parts[0] if len(parts) > 1 and parts[0] in PERSONALITIES else ""


def problems() -> list:
    found = []
    for path in sorted(CORE.rglob("*")):
        if path.suffix not in (".cc", ".hh", ".h"):
            continue
        mine = folder_of(path)
        name = str(path.relative_to(CORE))
        for header in INCLUDE.findall(path.read_text()):
            theirs = header.split("/")[0] if "/" in header else ""
            if theirs not in PERSONALITIES:
                continue
            if mine and theirs != mine:
                found.append(f"{name} (the {mine} personality) includes {theirs}'s {header}")
            elif not mine and name not in ROOTS:
                found.append(f"{name} (the shared core) includes {header}")
    return found


def main() -> int:
    found = problems()
    for problem in found:
        print(problem)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
