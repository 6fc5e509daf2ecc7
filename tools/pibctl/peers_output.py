"""What the peers' suites print, read back as each test's outcome and, for
a test that did not run, why: libfabric's runfabtests.sh (its -v YAML)
and GoogleTest as UCX's gtest prints it (UCX's own SKIP lines)."""

import re

# runfabtests.sh -v prints one YAML entry a test: "- name: fi_x -args",
# then "  result: Pass|Fail|Notrun|Excluded|Fail [Timeout]...", and for a
# test that did not pass (-vv: also one not run) its programs' output,
# whose last line need not end: the next entry may follow on it.
_FAB_NAME = re.compile(r"(?:^|\S)- name:\s+(.*\S)\s*$")
_FAB_RESULT = re.compile(r"^  result:\s+(\S+)")
_FAB_SUMMARY = re.compile(r"^# Total Pass\s+\d+")
# What a test not run printed that says why: libfabric's own messages.
_FAB_WHY = re.compile(r"(fi_\w+\(\)?:? .*|-FI_E\w+.*|No data available.*|"
                      r"Function not implemented.*|Operation not supported.*)")


def fabtests(out: str) -> tuple:
    """({test: "Pass" | "Fail" | "Notrun" | "Excluded"}, {test: why not
    run}, whether the summary came) from runfabtests.sh -vv."""
    outcomes, why, name, ended = {}, {}, None, False
    for line in out.splitlines():
        m = _FAB_NAME.search(line)
        if m:  # the same test on every device: its addresses as ADDR
            name = re.sub(r"\b\d+\.\d+\.\d+\.\d+\b", "ADDR", m.group(1))
            continue
        m = _FAB_RESULT.match(line)
        if m and name:
            outcomes[name] = "Fail" if m.group(1).startswith("Fail") else m.group(1)
            if outcomes[name] == "Excluded":
                why[name] = "excluded by the provider's exclude list"
            continue
        if name and outcomes.get(name) == "Notrun" and name not in why:
            w = _FAB_WHY.search(line)
            if w:
                why[name] = _without_numbers(w.group(1))
        if _FAB_SUMMARY.match(line):
            ended = True
    for test, outcome in outcomes.items():
        if outcome == "Notrun":
            why.setdefault(test, "not run (no reason printed)")
    return outcomes, why, ended


# GoogleTest's lines: "[ RUN      ] suite.test/param", then "[       OK ]"
# or "[  FAILED  ]" with the same name; UCX prints "[     SKIP ] (why)"
# for a test that skips itself, which GoogleTest then counts as passed.
_G_RUN = re.compile(r"^\[ RUN      \] (\S+)(?: <[\w,]+/([\w.-]+):\d+>)?")
_G_OK = re.compile(r"^\[       OK \] (\S+)")
# (A failed test's line goes on with ", where GetParam() = ..." or its
# time; the summary's "[  FAILED  ] 2 tests, listed below:" names none.)
_G_FAILED = re.compile(r"^\[  FAILED  \] ([\w/]+\.[\w/]+)")
_G_SKIP = re.compile(r"^\[     SKIP \] \((.*)\)\s*$")
_G_END = re.compile(r"^\[==========\] \d+ tests? from \d+ test (suites|cases) ran")


def gtest(out: str, device: str = "") -> tuple:
    """({test: "ok" | "failed" | "skipped"}, {test: skip reason}, whether
    the run ended) from a GoogleTest binary's output; with `device`, only
    the uct tests on that device (UCX names it in the RUN line: "<rc_verbs/
    rxe0:1>") and the tests that name none."""
    outcomes, why, current, ended = {}, {}, None, False
    elsewhere = set()
    for line in out.splitlines():
        line = line.rstrip()
        if m := _G_RUN.match(line):
            current = m.group(1)
            if device and m.group(2) and m.group(2) != device:
                elsewhere.add(current)
        elif (m := _G_SKIP.match(line)) and current:
            why[current] = _without_numbers(m.group(1))
        elif m := _G_OK.match(line):
            outcomes[m.group(1)] = "skipped" if m.group(1) in why else "ok"
        elif m := _G_FAILED.match(line):
            outcomes[m.group(1)] = "failed"
        elif _G_END.match(line):
            ended = True
    for test in elsewhere:
        outcomes.pop(test, None)
        why.pop(test, None)
    return outcomes, why, ended


def _without_numbers(reason: str) -> str:
    """A reason with its addresses, sizes and counts made one, so that
    the same reason counts as one."""
    return re.sub(r"\b(0x[0-9a-f]+|\d+)\b", "N", reason.strip())[:120]
