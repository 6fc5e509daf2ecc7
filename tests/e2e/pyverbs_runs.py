"""rdma-core's pyverbs suite in a guest, for the tests: run as several
processes at once, every test's outcome classified from unittest -v, and
every skip matched to a reason the caller knows (a new reason fails)."""

import collections
import re

from pibctl import unittest_output
from pibctl.unittest_output import TEST_LINE

# The suite runs as this many processes at once, each over its share of
# the test modules: the driver, provider and device see several contexts
# creating, using and destroying objects concurrently. The rdmacm tests
# all listen on TCP port 7471, so they share one process.
PROCESSES = 2
_TOGETHER = ("test_rdmacm", "test_mlx5_rdmacm")


def _shards(modules):
    """The test modules split into at most PROCESSES lists, the rdmacm
    ones in the first."""
    shards = [[] for _ in range(PROCESSES)]
    shards[0] += [m for m in modules if m in _TOGETHER]
    for i, module in enumerate(m for m in modules if m not in _TOGETHER):
        shards[(i + 1) % PROCESSES].append(module)
    # An empty one would run the whole suite (run_tests.py names no test).
    return [shard for shard in shards if shard]


# run_tests.py with Python's cyclic garbage collector off, leaving by
# os._exit once unittest has printed its summary. Where a test skips
# halfway through making its objects (libmlx5 refusing a feature the
# device does not offer), pyverbs leaves objects that outlive their
# context, and the collector crashes the process when it frees them
# (docs/mlx5.md §13). Nothing is collected then: the objects stay until
# the process ends, and the kernel frees them.
_WITHOUT_GC = ("python3 -c 'import gc, os, runpy, sys; gc.disable(); "
               "sys.argv[0] = os.path.abspath(\"run_tests.py\")\n"
               "try:\n runpy.run_path(sys.argv[0], run_name=\"__main__\")\n"
               "except SystemExit as e:\n sys.stdout.flush(); sys.stderr.flush(); "
               "os._exit(e.code if isinstance(e.code, int) else 1)'")


def run(ctx, vm, device, left_out=(), without_gc=False, only=()):
    """Runs the suite in `vm` on `device` as PROCESSES processes at once,
    without the modules `left_out` (or of the modules `only` these), and,
    `without_gc`, without Python's cyclic garbage collector; returns their
    outputs, one per process."""
    # 2 MiB huge pages, which the huge-page tests (ODP's, parent
    # domains') allocate from: 16 of them, 32 MiB of the guest's RAM.
    setup = ("echo 16 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages && "
             "rm -rf /tmp/pyverbs && mkdir /tmp/pyverbs && cp -r /usr/share/doc/rdma-core/tests "
             "/tmp/pyverbs/tests && cd /tmp/pyverbs/tests && gunzip -f *.gz && ls test_*.py")
    modules = [name[:-3] for name in ctx.sh(vm, setup).out.split()
               if name[:-3] not in left_out and (not only or name[:-3] in only)]
    shards = _shards(modules)
    python = _WITHOUT_GC if without_gc else "python3 run_tests.py"
    script = "".join(
        f"{python} --dev {device} -v {' '.join('tests.' + m for m in shard)} "
        f">/tmp/pyverbs/{i}.out 2>&1 & " for i, shard in enumerate(shards)) + "wait"
    ctx.sh(vm, f"cd /tmp/pyverbs/tests && {{ {script}; }}", timeout=900, check=False)
    return [ctx.run(vm, ["cat", f"/tmp/pyverbs/{i}.out"]).out for i in range(len(shards))]


def _totals(outs):
    """unittest's own counts over every process: (ran, skipped, all OK)."""
    ran = skipped = 0
    ok = True
    for out in outs:
        told = unittest_output.totals(out)
        assert told, out[-3000:]
        ran, skipped, ok = ran + told[0], skipped + told[1], ok and told[2]
    return ran, skipped, ok


def check(outs, skips, skipped_tests, must_pass, least_passed):
    """Asserts the suite's outputs: every test classified, every skip's
    reason matching a pattern of `skips` ({pattern: why}) or its test
    named in `skipped_tests` ({name part: why}), no failure, every test of
    `must_pass` passed and at least `least_passed` in all. Prints the
    counts, by reason. Returns the names of the tests that passed."""
    ran, told_skipped, all_ok = _totals(outs)
    out = "\n".join(outs)
    found = {}
    for one in outs:
        found.update(unittest_output.results(one))
    by_outcome = {}
    for test, (outcome, _) in found.items():
        by_outcome.setdefault(outcome, []).append(test)
    skipped = [reason for outcome, reason in found.values() if outcome == "skipped"]
    print(f"pyverbs, {len(outs)} processes at once: ran {ran}, classified {len(found)}: " +
          ", ".join(f"{k} {len(v)}" for k, v in sorted(by_outcome.items())))
    for pattern, why in skips.items():
        reasons = [str(r) for r in skipped if re.search(pattern, str(r))]
        print(f"  skipped {len(reasons):3d}: {why}")
        for reason, n in sorted(collections.Counter(reasons).items()):  # each reason once
            print(f"      {n:3d} x {reason}")
    for name, why in skipped_tests.items():
        n = sum(1 for t, (o, _) in found.items() if o == "skipped" and name in t)
        print(f"  skipped {n:3d}: {name.rstrip('.')}: {why}")
    # Fail closed: every test is classified, and the skips counted here
    # are all the skips unittest counted.
    assert len(found) == ran, (
        f"{len(found)} of {ran} classified\n" +
        "\n".join(line for line in out.splitlines()
                  if TEST_LINE.match(line) and TEST_LINE.match(line).group(2) not in found))
    assert len(skipped) == told_skipped, f"{len(skipped)} skips classified, unittest counted {told_skipped}"
    unexplained = sorted(f"{test}: {reason}" for test, (outcome, reason) in found.items()
                         if outcome == "skipped"
                         and not any(re.search(p, str(reason)) for p in skips)
                         and not any(t in test for t in skipped_tests))
    assert not unexplained, "\n".join(unexplained)
    assert all_ok and set(by_outcome) <= {"ok", "skipped"}, "\n".join(o[-3000:] for o in outs)
    passed = {test.rsplit(".", 1)[1] for test in by_outcome.get("ok", [])}
    missing = [name for name in must_pass if name not in passed]
    assert not missing, f"did not pass: {missing}"
    assert len(passed) >= least_passed, out[-3000:]
    return passed
