"""./pib test --peers: other projects' own test suites, run as their
maintainers run them, between guests, on pib-hca, on the ConnectX
personality, and on Soft-RoCE (rdma_rxe over the guests' Ethernet) in
the same guests for comparison; each suite several times, and the
table of what they gave written into docs/peers.md.

The suites:
- opensm's osmtest: the inventory (-f c), then every validation (-f a)
  and the multicast flow (-f m, which -f a does not reach in Debian's
  build), on fabrics of one, two and four switches;
- rdma-core's tests (run_tests.py, the pyverbs suite) on each device,
  in one process, as `run_tests.py --dev DEV -v` runs them;
- libfabric's fabtests (runfabtests.sh's quick set) over the verbs
  provider, its MSG endpoints and its RDM ones through ofi_rxm, server in
  vm1 and client in vm2;
- UCX's gtest: the uct tests of rc_verbs, ud_verbs, rc_mlx5 and ud_mlx5,
  and a share of the ucp tests over rc, ud, rcx and udx, in vm1.
The last two are built once into the cache (peers_build.py), which the
guests mount at the same path (share.py).
"""

import collections
import copy
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from pibctl import bench_summary, fabric, paths, peers_build, peers_output, ui, unittest_output

RESULTS = paths.REPO / "docs" / "peers-results.json"
DOC = paths.REPO / "docs" / "peers.md"
TABLE_START = "<!-- peers table: written by ./pib test --peers from docs/peers-results.json -->"
TABLE_END = "<!-- end of the peers table -->"


@dataclass
class Result:
    """One run of one suite on one device."""
    passed: list = field(default_factory=list)  # test names
    failed: list = field(default_factory=list)
    skipped: dict = field(default_factory=dict)  # test name -> reason
    error: str = ""  # the suite did not reach its end: why
    output: str = ""  # what the suite printed, kept (runs_kept()) when a run failed


@dataclass(frozen=True)
class Device:
    name: str  # as the table calls it
    mlx5: bool = False  # the guests' HCAs are ConnectX functions
    rxe: bool = False  # Soft-RoCE over eth0, beside the guests' pib-hca

    def up_args(self, switches: int, share: bool) -> dict:
        """A fabric of two guests; with the peers' builds shared, guests of
        4 GiB: fabtests' fi_cq_test opens as many CQs as the device has
        (4096), through ofi_rxm 1.5 GB of them, which 2 GiB cannot hold."""
        return dict(vms=2, switches=switches, mlx5=("vm1", "vm2") if self.mlx5 else (),
                    memory=4096 if share else 2048,
                    share_dir=str(peers_build.peers_dir()) if share else "")

    @property
    def verbs(self) -> str:
        """The verbs device the suites use in each guest."""
        return "rxe0" if self.rxe else "mlx5_0" if self.mlx5 else "pib_0"

    def prepare(self, fab) -> None:
        """The device ready in every guest: IPoIB up on an InfiniBand one
        (rdma_cm resolves its addresses), Soft-RoCE made on eth0."""
        for vm in fab.vms:
            fabric.sh_in(vm.name, "modprobe rdma_rxe && { rdma link show rxe0 >/dev/null 2>&1 || "
                         "rdma link add rxe0 type rxe netdev eth0; }" if self.rxe else
                         "pib-ipoib-up")

    def address(self, vm: str) -> str:
        """Where rdma_cm reaches `vm` on this device: IPoIB, or the
        Ethernet Soft-RoCE runs over."""
        return f"{fabric.MGMT_NET if self.rxe else fabric.IPOIB_NET}.{vm.removeprefix('vm')}"


DEVICES = (Device("pib-hca"), Device("ConnectX", mlx5=True), Device("Soft-RoCE", rxe=True))


def osmtest(fab, device: "Device") -> Result:
    """osmtest's flows, from vm2 (opensm runs in vm1): each a test."""
    result = Result()
    flows = (("c", "Create Inventory"), ("a", "All Validations"), ("m", "Multicast"))
    for flag, name in flows:
        out = fabric.exec_in("vm2", ["sh", "-c", f"cd /tmp && osmtest -f {flag} -i osmtest.dat"],
                             timeout=600)
        verdict = f'OSMTEST: TEST "{name}" PASS'
        (result.passed if verdict in out.out and out.exitcode == 0 else result.failed).append(name)
        result.output += out.out
    return result


def rdma_core_tests(fab, device: "Device") -> Result:
    """rdma-core's tests from the guest's python3-pyverbs, in vm1."""
    script = ("rm -rf /tmp/peers-pyverbs && mkdir /tmp/peers-pyverbs && "
              "cp -r /usr/share/doc/rdma-core/tests /tmp/peers-pyverbs/tests && "
              "cd /tmp/peers-pyverbs/tests && gunzip -f *.gz && "
              f"python3 run_tests.py --dev {device.verbs} -v 2>&1")
    out = fabric.exec_in("vm1", ["sh", "-c", script], timeout=1800)
    result = Result(output=out.out)
    for test, (outcome, reason) in unittest_output.results(out.out).items():
        if outcome == "ok":
            result.passed.append(test)
        elif outcome == "skipped":
            result.skipped[test] = str(reason)
        else:
            result.failed.append(test)
    if unittest_output.totals(out.out) is None:
        result.error = (f"run_tests.py ended before its summary (exit {out.exitcode}): "
                        + out.out.strip().splitlines()[-1][:200] if out.out.strip() else "")
    return result


# runfabtests.sh's providers: verbs' MSG endpoints, and RDM ones through
# ofi_rxm (what MPI and most libfabric users take over verbs).
FABTESTS_PROVIDERS = ("verbs", "verbs;ofi_rxm")


def fabtests(fab, device: "Device") -> Result:
    """runfabtests.sh's quick set (unit, functional, short) for each
    provider, server vm1 and client vm2 (started over ssh, as the script
    does), from share/fabtests so that its providers' exclude lists
    apply."""
    prefix = peers_build.fabtests()
    result = Result()
    for provider in FABTESTS_PROVIDERS:
        script = (f"cd {prefix}/share/fabtests && {prefix}/bin/runfabtests.sh -vv -T 120 "
                  f"-p {prefix}/bin -s {device.address('vm1')} -c {device.address('vm2')} "
                  f"'{provider}' vm1 vm2 2>&1")
        out = fabric.exec_in("vm1", ["sh", "-c", script], timeout=3600)
        outcomes, why, ended = peers_output.fabtests(out.out)
        result.output += out.out
        for test, outcome in outcomes.items():
            name = f"{provider}: {test}"
            if outcome == "Pass":
                result.passed.append(name)
            elif outcome == "Fail":
                result.failed.append(name)
            else:
                result.skipped[name] = why[test]
        if not ended:
            result.error += f"runfabtests.sh '{provider}' ended before its summary " \
                            f"(exit {out.exitcode}). "
    return result


# UCX's gtest: its uct tests are instantiated by transport, its ucp tests
# by transport set (rc and ud: verbs; rcx and udx: mlx5's accelerated).
# Every uct test of the four transports runs; of ucp's 2,600 tests a set,
# only its classes of tag matching (eager and rendezvous), RMA, atomics,
# memory mapping, active messages with rendezvous and streams: the whole
# of it takes hours a run under TCG.
UCX_UCT_TRANSPORTS = ("rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5")
UCX_UCP_SETS = ("rc", "ud", "rcx", "udx")
UCX_UCP_CLASSES = ("test_ucp_tag_match", "test_ucp_tag_match_rndv", "test_ucp_rma",
                   "test_ucp_atomic32", "test_ucp_atomic64", "test_ucp_mmap",
                   "test_ucp_am_nbx_rndv", "test_ucp_stream")
# Left out on Soft-RoCE, each with why (the suite's own defects):
UCX_GTEST_LEFT_OUT_RXE = {
    # ud_verbs' am_short_iov takes min(QP's send SGEs - 1, 8) iovs behind
    # its header SGE, into an array of 8 (ud_verbs.c): on a QP that reports
    # 9 or more SGEs, as rdma_rxe does when the inline size UCX asks for
    # gives the WQE that room, it writes past the array over its own work
    # request, and the process dies in ibv_post_send. pib-hca's and
    # libmlx5's QPs report the send SGEs asked for.
    "ud_verbs/uct_p2p_am_test.*": "UCX 1.13's ud_verbs overruns its own SGE array",
    "ud_verbs/uct_p2p_am_misc.am_max_short_iov_multi/*": "the same",
    "ud_verbs/test_uct_stats.am_short_iov/*": "the same",
}


def ucx_gtest_filter(device: "Device") -> str:
    """The tests UCX's gtest runs on `device`."""
    tests = [f"{t}/*" for t in UCX_UCT_TRANSPORTS] + \
        [f"{s}/{c}.*" for s in UCX_UCP_SETS for c in UCX_UCP_CLASSES]
    left_out = UCX_GTEST_LEFT_OUT_RXE if device.rxe else {}
    return ":".join(tests) + ("-" + ":".join(left_out) if left_out else "")


# As test/gtest's `make test` runs it, but for errors: a backtrace and
# on, not the default freeze, which would hold the run until its timeout.
UCX_GTEST_ENV = "UCX_HANDLE_ERRORS=bt UCX_LOG_LEVEL=warn UCX_LOG_PRINT_ENABLE=y"


def ucx_gtest(fab, device: "Device") -> Result:
    """UCX's gtest in vm1 over the device's verbs and mlx5 transports."""
    build = peers_build.ucx_gtest()
    # ucp takes the device it is told; uct's tests run on every device a
    # guest has (Soft-RoCE's guests have pib_0 too), and count on this one.
    script = (f"cd {build}/test/gtest && {UCX_GTEST_ENV} UCX_NET_DEVICES={device.verbs}:1 "
              f"stdbuf -e0 -o0 ./gtest '--gtest_filter={ucx_gtest_filter(device)}' 2>&1")
    out = fabric.exec_in("vm1", ["sh", "-c", script], timeout=4 * 3600)
    outcomes, why, ended = peers_output.gtest(out.out, device.verbs)
    result = Result(output=out.out)
    for test, outcome in outcomes.items():
        if outcome == "ok":
            result.passed.append(test)
        elif outcome == "skipped":
            result.skipped[test] = why[test]
        else:
            result.failed.append(test)
    if not ended:
        last = out.out.strip().splitlines()[-1][:200] if out.out.strip() else ""
        result.error = f"gtest ended before its summary (exit {out.exitcode}): {last}"
    return result


@dataclass(frozen=True)
class Suite:
    name: str
    run: object  # (fabric, device) -> Result
    switches: tuple = (1,)  # the fabrics it runs on
    ib_only: bool = False  # needs an InfiniBand subnet (not Soft-RoCE)
    build: object = None  # what it needs built first (peers_build.py)


SUITES = (
    Suite("osmtest", osmtest, switches=(1, 2, 4), ib_only=True),
    Suite("rdma-core tests", rdma_core_tests),
    Suite("fabtests", fabtests, build=peers_build.fabtests),
    Suite("UCX gtest", ucx_gtest, build=peers_build.ucx_gtest),
)


def campaign(runs: int, suites=SUITES, devices=DEVICES, keep=None, add=False) -> dict:
    """Runs each suite `runs` times on each device; returns
    {suite: {device: [Result as dict, ...]}}, written to RESULTS and the
    docs after every run (a campaign cut short keeps what it ran),
    over `keep`'s results for the suites and devices it does not run, and
    with `add` for those it runs too (its runs follow theirs)."""
    for suite in suites:
        if suite.build:
            suite.build()
    keep = copy.deepcopy(keep or {})
    table = collections.defaultdict(dict, keep if add else kept(keep, suites, devices))
    revision = bench_summary.revision(outputs=(RESULTS, DOC))
    for device in devices:
        for switches in sorted({s for suite in suites for s in suite.switches}):
            chosen = [s for s in suites if switches in s.switches and not (s.ib_only and device.rxe)]
            if not chosen:
                continue
            ui.step(f"Peers' suites on {device.name}, {switches} switch(es): "
                    f"{', '.join(s.name for s in chosen)}, {runs} runs each")
            fab = fabric.up(**device.up_args(switches, share=any(s.build for s in chosen)))
            try:
                device.prepare(fab)
                for suite in chosen:
                    key = suite.name if len(suite.switches) == 1 else \
                        f"{suite.name}, {switches} switch{'es' if switches > 1 else ''}"
                    done = table[key].setdefault(device.name, [])
                    for n in range(runs):
                        start = time.monotonic()
                        result = suite.run(fab, device)
                        done.append({**summary(result), "revision": revision})
                        write_doc(dict(table))
                        ui.detail(f"{key} on {device.name}, run {n + 1}: {len(result.passed)} "
                                  f"passed, {len(result.failed)} failed, {len(result.skipped)} "
                                  f"skipped{', ' + result.error if result.error else ''} "
                                  f"({time.monotonic() - start:.0f} s){keep_output(key, device, result)}")
            finally:
                fabric.down(quiet=True)
    return dict(table)


# Where a campaign keeps what a failed run printed, to find out why:
# failed-runs/ beside the peers' builds, in the cache.
def runs_kept() -> Path:
    return paths.cache_dir() / "peers" / "failed-runs"


def keep_output(key: str, device: "Device", result: Result) -> str:
    """Keeps `result`'s output if it failed; what the run's line says of
    it ("" when it passed)."""
    if not (result.failed or result.error):
        return ""
    runs_kept().mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = runs_kept() / f"{key.replace(' ', '_').replace(',', '')}-{device.name}-{stamp}.log"
    path.write_text(result.output)
    return f"; its output: {path}"


def kept(results: dict, suites, devices) -> dict:
    """`results` less what a campaign of `suites` on `devices` replaces."""
    names, runs = {s.name for s in suites}, {d.name for d in devices}
    kept_ = {key: {d: r for d, r in by.items() if _suite_of(key) not in names or d not in runs}
             for key, by in results.items()}
    return {key: by for key, by in kept_.items() if by}


def _suite_of(key: str) -> str:
    """The suite a results key names ("osmtest, 2 switches": osmtest)."""
    return key.split(",", 1)[0]


def summary(result: Result) -> dict:
    """What the results file keeps of a run: the counts, the failed tests
    by name, the skips by reason."""
    return {"passed": len(result.passed), "failed": sorted(result.failed),
            "skipped": dict(collections.Counter(result.skipped.values()).most_common()),
            "error": result.error}


def _row(suite: str, device: str, runs: list) -> str:
    """A table row: the counts of the last run, how many runs failed, and
    which tests flaked (failed in some runs that ran to their end, not in
    others)."""
    last = runs[-1]
    failed_runs = sum(1 for r in runs if r["failed"] or r["error"])
    whole = [set(r["failed"]) for r in runs if not r["error"]]
    flaky = sorted(set().union(*whole) - set.intersection(*whole)) if whole else []
    reasons = collections.Counter(last["skipped"])
    # The commonest first, ties by name: the same table from a campaign's
    # results as from the file they were written to (sorted keys).
    top = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    why = "; ".join(f"{n} x {_cell(reason)}" for reason, n in top)
    more = f" (+{len(reasons) - 3} more reasons)" if len(reasons) > 3 else ""
    crashed = sum(1 for r in runs if r["error"])
    return (f"| {suite} | {device} | {_runs_cell(runs)} | {last['passed']} | {len(last['failed'])} "
            f"| {sum(reasons.values())}{': ' + why + more if why else ''} "
            f"| {failed_runs} of {len(runs)}{f' ({crashed} died before the end)' if crashed else ''} "
            f"| {', '.join(flaky[:5]) or '-'} |")


def _runs_cell(runs: list) -> str:
    """How many runs, and of which commits when they are known: a campaign
    run in parts (--add) can span several."""
    commits = list(dict.fromkeys(r["revision"].split()[0] for r in runs if r.get("revision")))
    unknown = sum(1 for r in runs if not r.get("revision"))
    if not commits:
        return str(len(runs))
    of = ", ".join(commits) + (f" and {unknown} of an earlier commit" if unknown else "")
    return f"{len(runs)} ({of})"


def _cell(text: str, limit: int = 60) -> str:
    """`text` as a table cell: one line, no column bar, at most `limit`."""
    text = " ".join(text.split()).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def render(table: dict) -> str:
    lines = [TABLE_START, "",
             "| suite | device | runs | passed | failed | skipped (top reasons) | runs that failed "
             "| flaky tests |", "|---|---|---|---|---|---|---|---|"]
    order = [d.name for d in DEVICES]
    for suite in sorted(table):
        for device in sorted(table[suite], key=order.index):
            lines.append(_row(suite, device, table[suite][device]))
    lines += ["", TABLE_END]
    return "\n".join(lines)


def _table_span(text: str) -> tuple:
    """Where docs/peers.md's table starts and ends, its markers included."""
    return text.index(TABLE_START), text.index(TABLE_END) + len(TABLE_END)


def write_doc(table: dict) -> None:
    RESULTS.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    text = DOC.read_text()
    start, end = _table_span(text)
    DOC.write_text(text[:start] + render(table) + text[end:])


def doc_is_current() -> str:
    """'' when docs/peers.md shows what docs/peers-results.json holds;
    else what differs."""
    table = json.loads(RESULTS.read_text())
    text = DOC.read_text()
    start, end = _table_span(text)
    return "" if text[start:end] == render(table) else \
        "docs/peers.md's table is not the rendering of docs/peers-results.json"


def run(runs: int, names=(), device_names=(), add: bool = False) -> int:
    """The campaign of the suites `names` on the devices `device_names`
    (all by default); the results of the others stay as the last campaign
    left them, and with `add` theirs too, its runs added to them."""
    for asked, known, what in ((names, SUITES, "suite"), (device_names, DEVICES, "device")):
        unknown = set(asked) - {k.name for k in known}
        if unknown:
            raise ui.StepFailed(f"no such {what}: {', '.join(sorted(unknown))}; the {what}s are "
                                f"{', '.join(k.name for k in known)}")
    chosen = tuple(s for s in SUITES if not names or s.name in names)
    devices = tuple(d for d in DEVICES if not device_names or d.name in device_names)
    table = campaign(runs, chosen, devices,
                     keep=json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}, add=add)
    print(render(table))
    ours, everywhere = verdict(table)
    for test in everywhere:
        print(f"fails on Soft-RoCE too (the suite's or the stack's own): {test}")
    for test in ours:
        print(f"failed on pib-hca or ConnectX (a defect of ours until shown otherwise): {test}")
    return 1 if ours else 0


def verdict(table: dict) -> tuple:
    """(what failed on pib-hca or ConnectX and not on Soft-RoCE, what
    failed on Soft-RoCE as well), each as "suite: test on device" lines; a
    run that died counts as a failure of ours."""
    ours, everywhere = [], []
    for suite, by in sorted(table.items()):
        theirs = {t for r in by.get("Soft-RoCE", []) for t in r["failed"]}
        for device, runs in by.items():
            if device == "Soft-RoCE":
                continue
            failed = sorted({t for r in runs for t in r["failed"]})
            ours += [f"{suite}: {t} on {device}" for t in failed if t not in theirs]
            everywhere += [f"{suite}: {t} on {device}" for t in failed if t in theirs]
            ours += [f"{suite}: a run died ({r['error']}) on {device}" for r in runs if r["error"]]
    return ours, everywhere
