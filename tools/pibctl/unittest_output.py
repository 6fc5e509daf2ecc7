"""What Python's unittest prints with -v, read back: each test's outcome
and, for a skip, its reason (rdma-core's pyverbs suite, which the
end-to-end tests and ./pib test --peers run)."""

import ast
import re

# unittest -v names each test "test_x (module.Class.test_x)", maybe prints
# its docstring on the next line, and ends with " ... OUTCOME"; when the
# test itself prints, the outcome comes alone on a later line. A skip's
# reason is the repr() of a string, in either kind of quotes.
TEST_LINE = re.compile(r"^(\w+) \(([\w.]+)\)")
_OUTCOME = re.compile(r"(?:^|\.\.\. )(ok|FAIL|ERROR|expected failure|unexpected success|"
                      r"skipped (['\"].*['\"]))$")


def results(out):
    """{"module.Class.test": (outcome, skip reason or None)} from unittest -v."""
    found, current = {}, None
    for line in out.splitlines():
        m = TEST_LINE.match(line)
        if m:
            current = m.group(2)
        o = _OUTCOME.search(line.strip())
        if o and current:
            reason = o.group(2)
            if reason is not None:
                try:
                    reason = ast.literal_eval(reason)
                except (ValueError, SyntaxError):
                    pass  # kept as printed: it must still match a known reason
            found[current] = (o.group(1).split()[0], reason)
            current = None
    return found


def totals(out):
    """unittest's own summary: (tests ran, skipped, OK), or None when the
    run did not reach it (the process died)."""
    ran = re.search(r"^Ran (\d+) tests?", out, re.M)
    summary = re.search(r"^(OK|FAILED)(?: \((.*)\))?$", out, re.M)
    if not (ran and summary):
        return None
    skipped = re.search(r"skipped=(\d+)", summary.group(2) or "")
    return int(ran.group(1)), int(skipped.group(1)) if skipped else 0, summary.group(1) == "OK"
