"""rdma-core's pyverbs suite split over several guests, for the tests:
every test's outcome classified from unittest -v, and every skip matched
to a reason the caller knows (a new reason fails)."""

import collections
import concurrent.futures
import re

from pibctl import unittest_output
from pibctl.unittest_output import TEST_LINE

# The suite's test modules are split over the guests given and over
# processes in each, the shares about as many tests each. On pib_0 one
# process in each of two guests (2 vCPUs each) is fastest: the whole
# suite took 53-60 s as two processes in one guest, 30-48 s split over two.
# On mlx5_0 the split over two guests took 81-94 s against 43 s as two
# processes in one: the ConnectX test keeps those. The rdmacm tests all
# listen on TCP port 7471 and use the first guest's ib0, so they run
# together there.
_TOGETHER = ("test_rdmacm", "test_mlx5_rdmacm")


def _shards(tests_in, count):
    """The test modules ({module: how many tests}) split into at most
    `count` lists of about as many tests each, the rdmacm ones together
    in the first."""
    shards = [[] for _ in range(count)]
    load = [0] * count
    for module in (m for m in tests_in if m in _TOGETHER):
        shards[0].append(module)
        load[0] += tests_in[module]
    for module in sorted((m for m in tests_in if m not in _TOGETHER),
                         key=lambda m: (-tests_in[m], m)):
        least = load.index(min(load))
        shards[least].append(module)
        load[least] += tests_in[module]
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

# 2 MiB huge pages, which the huge-page tests (ODP's, parent domains')
# allocate from: 16 of them, 32 MiB of the guest's RAM. Prints each test
# module with how many tests it defines.
_SETUP = ("echo 16 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages && "
          "rm -rf /tmp/pyverbs && mkdir /tmp/pyverbs && cp -r /usr/share/doc/rdma-core/tests "
          "/tmp/pyverbs/tests && cd /tmp/pyverbs/tests && gunzip -f *.gz && "
          "grep -c '^    def test_' test_*.py")


def _in_parallel(jobs):
    """Runs the callables `jobs` at once; returns their results in order
    (the first one's exception, if one raised)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(lambda job: job(), jobs))


def run(ctx, vms, device, left_out=(), without_gc=False, per_guest=1):
    """Runs the suite on `device`, split over the guests `vms` (the first
    one's ib0 up), `per_guest` processes at once in each, without the
    modules `left_out` and, `without_gc`, without Python's cyclic garbage
    collector; returns their outputs, one per process."""
    counted = _in_parallel([lambda vm=vm: ctx.sh(vm, _SETUP).out for vm in vms])[0]
    tests_in = {}
    for line in counted.split():
        name, count = line.rsplit(":", 1)
        if name[:-3] not in left_out:
            tests_in[name[:-3]] = int(count)
    shards = _shards(tests_in, len(vms) * per_guest)
    python = _WITHOUT_GC if without_gc else "python3 run_tests.py"

    def one_guest(g):
        mine = range(g, len(shards), len(vms))  # shard 0, the rdmacm tests', in vms[0]
        script = "".join(
            f"{python} --dev {device} -v {' '.join('tests.' + m for m in shards[i])} "
            f">/tmp/pyverbs/{i}.out 2>&1 & " for i in mine) + "wait"
        ctx.sh(vms[g], f"cd /tmp/pyverbs/tests && {{ {script}; }}", timeout=900, check=False)
        return [ctx.run(vms[g], ["cat", f"/tmp/pyverbs/{i}.out"]).out for i in mine]

    return [out for outs in _in_parallel([lambda g=g: one_guest(g) for g in range(len(vms))])
            for out in outs]


def _what_failed(out, most=6000):
    """unittest's report of each failure and error in `out`, after every
    traceback and rdmacm player's exception printed among the tests' lines
    (an rdmacm test's two sides are processes of their own, which print
    "Player active got: ..." and exit 2; unittest reports only that one
    failed)."""
    cut = out.find("\n======")
    if cut < 0:
        return out[-3000:]
    lines = out[:cut].splitlines()
    beside = ["\n".join(lines[i:i + 25]) for i, line in enumerate(lines)
              if line.startswith("Traceback")]
    beside += [line for line in lines if line.startswith("Player ")]
    return "\n...\n".join(beside + [out[cut:cut + most]])


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
    shares = [re.search(r"^Ran (\d+) tests? in ([\d.]+)s$", o, re.M) for o in outs]
    print(f"pyverbs, {len(outs)} processes at once: ran {ran} ("
          + ", ".join(f"{m.group(1)} in {float(m.group(2)):.0f} s" for m in shares if m)
          + f"), classified {len(found)}: "
          + ", ".join(f"{k} {len(v)}" for k, v in sorted(by_outcome.items())))
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
    assert all_ok and set(by_outcome) <= {"ok", "skipped"}, "\n".join(_what_failed(o) for o in outs)
    passed = {test.rsplit(".", 1)[1] for test in by_outcome.get("ok", [])}
    missing = [name for name in must_pass if name not in passed]
    assert not missing, f"did not pass: {missing}"
    assert len(passed) >= least_passed, out[-3000:]
    return passed
