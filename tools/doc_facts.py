#!/usr/bin/env python3
"""Facts of docs/ that the code states, kept true by computing them.

The component table of docs/architecture.md ends each row with the lines
of the files it names (qemu-hw/core/src; `x.*` and `a*.{hh,cc}` are
globs), and every file of the core is in exactly one row. docs/migration.md names the device state's format version
(kStateVersion in device_state.cc), in its table and in the refusals it
quotes ("of version N; this device reads version M", M the current one).
README.md's `docs/` row links every document in docs/, and only those.
README.md's Status section gives the hardware interface's version
(pib_hw.h's PIB_IF_VERSION_CURRENT, as docs/prm.md does), and every
`./pib ...` it names is a command with options that ./pib takes.
Without arguments this rewrites the numbers; with --check it fails when
one is out of date (`./pib test` runs the check). A file in no row, or a
document the README does not link, fails either way.
"""

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
from pibctl.migrate import state_version  # noqa: E402  (the one reading of it)

DOC = ROOT / "docs" / "architecture.md"
CORE = ROOT / "qemu-hw" / "core" / "src"
ROW = re.compile(r"^(\| [^|]+ \| )([^|]+)( \| [^|]+ \| )(\d+)( \|)$", re.M)
MIGRATION = ROOT / "docs" / "migration.md"
TABLE_VERSION = re.compile(r"(\| `PIBD` \| the format version \()(\d+)(\))")
REFUSAL = re.compile(r"(of version )(\d+)(;\s+this device reads\s+version )(\d+)")


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


def unplaced(text: str) -> list:
    """The core's files in no row of the component table, or in two."""
    rows = {}
    for m in ROW.finditer(text):
        for name in re.findall(r"`([^`]+)`", m.group(2)):
            for f in _expand(name):
                rows.setdefault(f, set()).add(m.group(1).strip("| "))
    files = sorted(f for f in CORE.rglob("*") if f.suffix in (".cc", ".hh"))
    return [f"docs/architecture.md's component table: {f.relative_to(CORE)} is in "
            + (" and ".join(sorted(rows[f])) if f in rows else "no row")
            for f in files if len(rows.get(f, ())) != 1]


README = ROOT / "README.md"
HW = ROOT / "include" / "pib_hw.h"
PRM = ROOT / "docs" / "prm.md"
README_VERSION = re.compile(r"(\(interface )(\d+\.\d+)(,)")
PRM_VERSION = re.compile(r"(interface version \*\*)(\d+\.\d+)(\*\*)")


def interface_version() -> str:
    m = re.search(r"#define PIB_IF_VERSION_CURRENT PIB_IF_VERSION\((\d+), (\d+)\)",
                  HW.read_text())
    return f"{m[1]}.{m[2]}"


def versions_updated(text: str) -> str:
    """The interface version where README.md and docs/prm.md give it."""
    for pattern in (README_VERSION, PRM_VERSION):
        text = pattern.sub(lambda m: m[1] + interface_version() + m[3], text, count=1)
    return text


def status_section(text: str) -> str:
    start = text.index("\n## Status\n")
    return text[start:text.index("\n## ", start + 1)]


def unknown_commands(text: str) -> list:
    """The `./pib ...` of README.md's Status section that ./pib does not
    take: a command or an option it has not."""
    from pibctl import cli

    parser = cli.build_parser()
    return [f"README.md's Status names `./pib {words}`: {why}"
            for words in re.findall(r"`\./pib ([^`]+)`", status_section(text))
            if (why := _refusal(parser, words.split()))]


def _refusal(parser, words: list) -> str:
    """Why ./pib refuses the command `words` ("" if it takes it): a
    command, an option or a choice (`save|load`: each) it has not. Other
    words are values, and what follows `--` is not ./pib's."""
    positionals = iter(a for a in parser._actions if not a.option_strings)
    for word in words[:words.index("--")] if "--" in words else words:
        if word.startswith("-"):
            if word.split("=")[0] not in parser._option_string_actions:
                return f"{word} is not an option of {parser.prog}"
            continue
        action = next(positionals, None)
        unknown = [w for w in word.split("|") if action and action.choices
                   and w not in action.choices]
        if unknown:
            return f"{parser.prog} takes no {unknown[0]}"
        if isinstance(action, argparse._SubParsersAction):
            parser = action.choices[word.split("|")[0]]
            positionals = iter(a for a in parser._actions if not a.option_strings)
    return ""


def unlinked_docs(readme: str) -> list:
    """docs/*.md that README.md's `docs/` row does not link, and links to
    documents that do not exist."""
    row = next((line for line in readme.splitlines() if line.startswith("| `docs/` |")), "")
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", row))
    present = {f.name for f in (ROOT / "docs").glob("*.md")}
    return ([f"README.md's docs/ row does not link docs/{name}" for name in sorted(present - linked)]
            + [f"README.md links docs/{name}, which does not exist" for name in sorted(linked - present)])


def updated(text: str) -> str:
    return ROW.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}{lines_of(m.group(2))}{m.group(5)}",
                   text)


def migration_updated(text: str) -> str:
    """The versions in docs/migration.md: a refusal keeps how far its
    stream's version is from the device's."""
    version = state_version()
    text = TABLE_VERSION.sub(lambda m: f"{m.group(1)}{version}{m.group(3)}", text)
    return REFUSAL.sub(lambda m: f"{m.group(1)}{int(m.group(2)) - int(m.group(4)) + version}"
                                 f"{m.group(3)}{version}", text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a fact is out of date")
    args = parser.parse_args()
    stale = []
    for doc, update in ((DOC, updated), (MIGRATION, migration_updated),
                        (README, versions_updated), (PRM, versions_updated)):
        text = doc.read_text()
        new = update(text)
        if new != text:
            stale.append(doc.relative_to(ROOT))
            if not args.check:
                doc.write_text(new)
    misplaced = (unplaced(DOC.read_text()) + unlinked_docs(README.read_text())
                 + unknown_commands(README.read_text()))
    for problem in misplaced:
        print(problem)
    if misplaced:
        return 1
    if args.check and stale:
        print(f"{', '.join(map(str, stale))}: facts of the code out of date; run tools/doc_facts.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
