"""The end-to-end suite under pytest: each test is `def test_...(ctx)` on
the fabric of one pass (tools/pibctl/e2e_pass.py), shared by every test of
the session. ./pib test runs one session per pass; after ./pib setup, so
does

    python3 -m pytest tests/e2e --pib-pass connectx -k ipoib

Modules say where they run and what they do on purpose with the markers
of pytest.ini. The checks around the tests (the fabric's boot, each
module's log gate and ibqueryerrors, fabric down) are made here, and a
test that fails gets the fabric's logs as a section of its report."""

import os
import sys
from pathlib import Path

import pytest

TOOLS = str(Path(__file__).resolve().parents[2] / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)
from pibctl import e2e_pass, test_lanes  # noqa: E402
from transfers import BackgroundTraffic  # noqa: E402


def pytest_addoption(parser):
    group = parser.getgroup("pib-hca", "pib-hca's end-to-end passes")
    group.addoption("--pib-pass", default="main", choices=tuple(e2e_pass.PASSES),
                    help="the pass, and so the fabric, to run the tests on (default: main)")
    group.addoption("--pib-vms", type=int, default=2,
                    help="guests of the passes on one switch (default: 2)")
    group.addoption("--pib-accel", default="tcg", choices=("tcg", "kvm"))
    group.addoption("--pib-soak", action="store_true",
                    help="also the tests marked soak (a minute or more each)")


def pytest_configure(config):
    """A session that ./pib test runs brings its PassRun as a plugin; one
    started by hand gets its own, whose fabric runs in the test run
    directory (a fabric the user has up is left alone)."""
    if _run(config) is None:
        os.environ.setdefault("PIB_RUN_DIR", str(test_lanes.run_dir(test_lanes.FIRST)))
        which = e2e_pass.PASSES[config.getoption("pib_pass")]
        config.pluginmanager.register(
            e2e_pass.PassRun(which, config.getoption("pib_vms"), config.getoption("pib_accel")))


def _run(config) -> e2e_pass.PassRun:
    return next((plugin for plugin in config.pluginmanager.get_plugins()
                 if isinstance(plugin, e2e_pass.PassRun)), None)


def pytest_collection_modifyitems(config, items):
    """Only the pass's tests, and soaks only when asked for: by
    --pib-soak, or by a -m expression that names the marker (-m soak runs
    only them). Tests run in the order of their modules' file names, and
    in a module by name: the order the suite has always had, which its
    tests were written in."""
    run = _run(config)
    soaks = config.getoption("pib_soak") or "soak" in config.getoption("markexpr")
    chosen = [i for i in items
              if run.which.selects(i) and (soaks or not i.get_closest_marker("soak"))]
    dropped = [i for i in items if i not in chosen]
    chosen.sort(key=lambda i: (i.path.name, i.name))
    items[:] = chosen
    if dropped:
        config.hook.pytest_deselected(items=dropped)


def pytest_collection_finish(session):
    _run(session.config).selected(len(session.items))


@pytest.fixture(scope="session")
def pass_run(request):
    """The booted fabric of the pass; down after its last test."""
    run = _run(request.config)
    if not run.up(len(request.session.items)):
        pytest.exit(f"the fabric of {run.where} did not boot", returncode=1)
    yield run
    run.down()


@pytest.fixture(scope="session")
def ctx(pass_run):
    return e2e_pass.Context(pass_run.fab)


@pytest.fixture(autouse=True)
def fabric_still_runs(request, pass_run):
    """After each test: the fabric's processes and state are all there,
    so that a fabric gone from under the pass is laid at the test it went
    in, not at the next one to use it."""
    yield
    pass_run.check_still_runs(request.node.nodeid)


@pytest.fixture(autouse=True)
def background_traffic_ended():
    """After each test: the pib-traffic it started and did not wait for
    (it failed first) is ended, so that it does not run on into the next
    tests, which would then time their traffic against it."""
    yield
    while BackgroundTraffic.unfinished:
        run = BackgroundTraffic.unfinished.pop()
        try:
            run.end()
        except Exception as e:  # pylint: disable=broad-except
            print(f"pib-traffic on port {run.port} could not be ended: {e!r}")


@pytest.fixture(scope="module", autouse=True)
def module_checks(request, pass_run):
    """After a module's last test: its log gate and ibqueryerrors."""
    yield
    items = request.session.items
    last = bool(items) and items[-1].getparent(pytest.Module) is request.node
    pass_run.check_module(request.node, last_of_pass=last)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        report.sections.append(("the fabric when it failed", _run(item.config).failure_report()))
    # A failed check of the pass is recorded where it was made; pytest shows
    # it as an error of the test it ran after, which itself passed.
    report.pib_check = bool(call.excinfo and call.excinfo.errisinstance(e2e_pass.CheckFailed))
