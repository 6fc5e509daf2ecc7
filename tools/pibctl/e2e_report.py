"""./pib test's account of a pytest session of end-to-end tests, in place
of pytest's own terminal output: each test's PASS or FAIL line, counted with
the run's other checks; under a failure, its traceback and the fabric's
logs; and the phase table's steps ended with each test."""

import pytest

from pibctl import ui


class Reporter:
    """A pytest plugin recording into `counts` (testing.Counts); `suffix`
    follows each test's name (the pass's, e2e_pass.Pass.suffix)."""

    def __init__(self, counts, suffix: str):
        self.counts = counts
        self.suffix = suffix
        self.interrupted = False  # by the user (^C): the whole run stops

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config):
        # pytest's terminal reporter goes; its options stay (-v, --tb), as
        # its assertion messages read them.
        terminal = config.pluginmanager.get_plugin("terminalreporter")
        if terminal:
            config.pluginmanager.unregister(terminal)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        steps = ui.steps_taken()
        yield
        ui.end_steps_since(steps)  # a step a test takes ends with it

    def pytest_runtest_logreport(self, report):
        """A test counts once: when it ran, or when its setup failed. The
        checks after a module's last test, and fabric down after the
        pass's, run in that test's teardown; they count on their own, so
        only a teardown failure of the test's own counts as one more."""
        name = report.nodeid.replace(".py::", "::") + self.suffix
        if getattr(report, "pib_check", False):
            return
        if report.when == "call":
            self._record(name, report)
        elif report.when == "setup" and not report.passed:
            self._record(name, report)
        elif report.when == "teardown" and report.failed:
            self._record(f"{name}: its teardown", report)

    def _record(self, name: str, report) -> None:
        # No test skips: one that does is not a pass.
        if report.passed:
            self.counts.record(name, True, report.duration)
            return
        print(f"---- {name} failed ({report.when}) ----")
        print(_why(report) if report.skipped else report.longreprtext)
        for title, text in report.sections:
            print(f"---- {title} ----\n{text}")
        self.counts.record(name, False, report.duration, _why(report))

    def pytest_collectreport(self, report):
        if report.failed:
            print(report.longreprtext)
            self.counts.record(f"pytest collects {report.nodeid or 'tests/e2e'}", False, 0,
                               _why(report))

    def pytest_keyboard_interrupt(self, excinfo):
        # Also called for pytest.exit(), which a fabric that did not boot
        # ends its pass with: only ^C stops the run.
        self.interrupted = excinfo.errisinstance(KeyboardInterrupt)


def _why(report) -> str:
    """The first line of a failure: its exception and message."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash:
        return crash.message
    if report.skipped and isinstance(report.longrepr, tuple):
        return f"skipped: {report.longrepr[2].removeprefix('Skipped: ')}"
    return report.longreprtext.strip().splitlines()[-1] if report.longreprtext.strip() else ""
