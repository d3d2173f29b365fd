"""The suite's time budget: no single test or fixture past N seconds, unless listed with a reason.

On when TRAINPARITY_TEST_BUDGET_SECONDS is set (CI sets 60: .ci/run). Each test's
setup, call and teardown phases are measured, and each fixture's setup and teardown
apart from them: a module- or session-scoped fixture is set up inside the setup phase
of the first test that requests it, and without this a 7-minute fixture would read as
a 7-minute test. A fixture is charged its own time (a fixture it requests while it
runs is charged to that one), a test what is left of its three phases.

Measured where the tests run (in each pytest-xdist worker, or in the one process); the
fixtures' times travel on the phase's report, which xdist sends to the controller
whole, and the verdict is the controller's: at the end of the session it prints what
went past the budget and fails the session (exit status 1) for any entry that
tests/budget_exceptions.py does not list. Sleeping, not load, decides the plugin's own
tests (tests/test_time_budget.py). How to stay inside the budget: CONTRIBUTING.md.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

VARIABLE = "TRAINPARITY_TEST_BUDGET_SECONDS"
PLUGIN_NAME = "trainparity-time-budget"
EXCEPTIONS_FILE = "tests/budget_exceptions.py"
# The report attribute that carries a phase's fixture times from a worker to the controller:
# a list of (fixture id, "setup" or "teardown", seconds). pytest serialises a report's extra
# attributes with it, so xdist's controller receives them as they were set.
_FIXTURE_TIMES = "trainparity_fixture_seconds"


@dataclass(frozen=True)
class Overrun:
    """One test or fixture past the budget."""

    key: str  # what budget_exceptions.py lists: a test's node id, or "file::fixture name"
    description: str  # what the summary prints
    seconds: float


def register(config: pytest.Config, exceptions: Mapping[str, str] | None = None) -> None:
    """Measure this session against the budget in TRAINPARITY_TEST_BUDGET_SECONDS, if set.

    `exceptions` (key to reason) defaults to tests/budget_exceptions.py's table.
    """
    text = os.environ.get(VARIABLE, "").strip()
    if not text:
        return
    try:
        budget = float(text)
    except ValueError:
        budget = -1.0
    if not budget > 0:
        raise pytest.UsageError(
            f"{VARIABLE}={text!r}: expected the budget in seconds, a positive number "
            f"such as 60 (or leave it unset for no budget)"
        )
    if exceptions is None:
        from tests.budget_exceptions import EXCEPTIONS as exceptions
    config.pluginmanager.register(TimeBudget(config, budget, exceptions), PLUGIN_NAME)


class TimeBudget:
    """The plugin: measures in every process that runs tests, judges in the one that reports."""

    def __init__(self, config: pytest.Config, budget: float, exceptions: Mapping[str, str]):
        self.config = config
        self.budget = budget
        self.exceptions = dict(exceptions)
        # In an xdist worker, the controller judges; a worker only measures.
        self.judges = not hasattr(config, "workerinput")
        # Measuring (this process runs tests): the fixture times of the phase running now,
        # and, per fixture setup in progress, the time of fixtures set up inside it.
        self._phase_fixtures: list[tuple[str, str, float]] = []
        self._nested: list[float] = []
        self._keys: dict[pytest.FixtureDef, str] = {}
        self._root = config.rootpath.resolve()
        # Judging: each test's own seconds (its phases less its fixtures'), the overruns,
        # and the longest time seen per key (to tell which exceptions are no longer needed).
        self._own: dict[str, float] = {}
        self._overruns: list[Overrun] = []
        self._longest: dict[str, float] = {}
        self._tests_judged = False

    # Measuring.

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef
    ) -> Generator[None, object, object]:
        key = self._keys.get(fixturedef)
        if key is None:
            key = self._keys[fixturedef] = _fixture_key(fixturedef, self._root)
        teardown_started: list[float] = []
        # Finalizers run last-registered first. This one, registered before the fixture's
        # own code runs, ends after the fixture's teardown; the one registered after its
        # code ran starts before it (and after the fixtures that depend on it are torn down).
        fixturedef.addfinalizer(lambda: self._teardown_ended(key, teardown_started))
        self._nested.append(0.0)
        start = time.perf_counter()
        try:
            return (yield)
        finally:
            elapsed = time.perf_counter() - start
            inner = self._nested.pop()
            if self._nested:
                self._nested[-1] += elapsed
            self._phase_fixtures.append((key, "setup", elapsed - inner))
            fixturedef.addfinalizer(lambda: teardown_started.append(time.perf_counter()))

    def _teardown_ended(self, key: str, started: list[float]) -> None:
        if started:
            self._phase_fixtures.append((key, "teardown", time.perf_counter() - started.pop()))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        setattr(report, _FIXTURE_TIMES, self._phase_fixtures)
        self._phase_fixtures = []
        return report

    # Judging.

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.judges:
            return
        fixtures = getattr(report, _FIXTURE_TIMES, None) or []
        for key, action, seconds in fixtures:
            description = f"fixture {key} ({action} in {report.nodeid})"
            self._measured(key, description, seconds)
        own = report.duration - sum(seconds for _, _, seconds in fixtures)
        self._own[report.nodeid] = self._own.get(report.nodeid, 0.0) + max(own, 0.0)

    def _measured(self, key: str, description: str, seconds: float) -> None:
        self._longest[key] = max(seconds, self._longest.get(key, 0.0))
        if seconds > self.budget:
            self._overruns.append(Overrun(key, description, seconds))

    def _judge_tests(self) -> None:
        """Once every phase is in: each test's own time against the budget."""
        if not self._tests_judged:
            self._tests_judged = True
            for nodeid, seconds in self._own.items():
                self._measured(nodeid, f"test {nodeid} (setup, call and teardown)", seconds)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.judges:
            return
        self._judge_tests()
        # Only a session that would otherwise pass: an interrupted one keeps its status.
        if self._unlisted() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _listed(self, key: str) -> str | None:
        """The reason the table gives for this key: its own entry, or its test's unparametrized id."""
        reason = self.exceptions.get(key)
        if reason is None and key.endswith("]") and "[" in key:
            reason = self.exceptions.get(key[: key.index("[")])
        return reason

    def _unlisted(self) -> list[Overrun]:
        return [overrun for overrun in self._overruns if self._listed(overrun.key) is None]

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.judges:
            return
        self._judge_tests()
        write: Callable[[str], None] = terminalreporter.write_line
        unlisted = self._unlisted()
        terminalreporter.section(f"time budget: {self.budget:g} s", red=bool(unlisted))
        if not self._overruns:
            write(f"every test and fixture took at most {self.budget:g} s")
        for overrun in sorted(self._overruns, key=lambda overrun: -overrun.seconds):
            reason = self._listed(overrun.key)
            verdict = f"listed: {reason}" if reason is not None else "NOT LISTED"
            write(f"{overrun.seconds:7.1f} s  {overrun.description}: {verdict}")
        if unlisted:
            write(
                f"{len(unlisted)} past the budget and not listed: the session fails. Make each "
                "smaller (CONTRIBUTING.md, 'Keeping a test inside the budget'), or, where it "
                f"cannot shrink, add its key (the id before the parenthesis) to {EXCEPTIONS_FILE} "
                "with the reason"
            )
        # Not a failure (a quiet day can bring an entry under): a hint that the table may shrink.
        for key in sorted(self.exceptions):
            seen = [
                seconds
                for measured, seconds in self._longest.items()
                if measured == key or measured.startswith(key + "[")
            ]
            if seen and max(seen) <= self.budget:
                write(
                    f"listed but within the budget this time ({max(seen):.1f} s): {key} "
                    f"(remove it from {EXCEPTIONS_FILE} once it stays within)"
                )


def _fixture_key(fixturedef: pytest.FixtureDef, rootpath: Path) -> str:
    """'file::name', the file relative to the root where it is under it: what the table lists."""
    try:
        source = Path(inspect.getsourcefile(fixturedef.func) or "")
        where = source.resolve().relative_to(rootpath).as_posix()
    except (TypeError, ValueError):
        where = getattr(fixturedef.func, "__module__", None) or "?"
    return f"{where}::{fixturedef.argname}"
