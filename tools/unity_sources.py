#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Writes a library's unity files for meson (meson_options.txt, unity_files):

    unity_sources.py SIZE OUTPUT... -- SOURCE...

Each OUTPUT includes the next SIZE of the SOURCEs, named by their path from
the project's root, which the library's compile finds through its relative
include directory. Unlike meson's unity=on, whose files include their
sources by absolute paths, nothing in the compile (line markers, debug
information) then names the checkout's tree, so that ccache serves one
tree's compile to another."""

import sys


def main(argv) -> int:
    split = argv.index("--")
    size, outputs, sources = int(argv[1]), argv[2:split], argv[split + 1:]
    if size < 1 or len(outputs) != (len(sources) + size - 1) // size:
        print(f"unity_sources.py: {len(outputs)} outputs for {len(sources)} sources "
              f"of {size} a file", file=sys.stderr)
        return 1
    for n, output in enumerate(outputs):
        text = "".join(f'#include "{source}"\n' for source in sources[n * size:(n + 1) * size])
        try:
            with open(output, encoding="utf-8") as f:
                if f.read() == text:
                    continue  # unchanged: its compile is not redone
        except OSError:
            pass
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
