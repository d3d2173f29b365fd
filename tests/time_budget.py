"""The suite's time budget: no single test or fixture past N CPU seconds, unless listed with a reason.

On when TRAINPARITY_TEST_BUDGET_SECONDS is set (CI sets 60: .ci/run). What is judged
is CPU time, not wall time: the CPU seconds of the process that runs the test and of
every child it waited for (getrusage of itself and of its children: the checks'
phases, ranks and servers, forked warm or fresh). The suite is CPU-bound on 2 cores,
so its CPU is what a test costs it; and a busy machine stretches wall time far more
than CPU time (at load 5 to 10 the DeepSpeed fixtures took 2.0 to 2.9 times their wall
time and 1.04 to 1.32 times their CPU), so the verdict hardly depends on the load. The summary prints the wall time beside it. Time spent waiting without CPU (a
sleep, a timeout, a scheduler's queue) is not judged: a test waits for an event with a
deadline only a stuck run reaches (CONTRIBUTING.md).

Each test's setup, call and teardown phases are measured, and each fixture's setup and
teardown apart from them: a module- or session-scoped fixture is set up inside the
setup phase of the first test that requests it, and without this a 7-minute fixture
would read as a 7-minute test. A fixture is charged its own time (a fixture it
requests while it runs is charged to that one), a test what is left of its three phases.

Measured where the tests run (in each pytest-xdist worker, or in the one process); the
fixtures' times travel on the phase's report, which xdist sends to the controller
whole, and the verdict is the controller's: at the end of the session it prints what
went past the budget and fails the session (exit status 1) for any entry that
tests/budget_exceptions.py does not list. CPU spent on purpose, not load, decides the
plugin's own tests (tests/test_time_budget.py). How to stay inside the budget:
CONTRIBUTING.md.
"""

from __future__ import annotations

import inspect
import os
import resource
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

VARIABLE = "TRAINPARITY_TEST_BUDGET_SECONDS"
PLUGIN_NAME = "trainparity-time-budget"
EXCEPTIONS_FILE = "tests/budget_exceptions.py"
# The report attributes that carry a phase's times from a worker to the controller: the
# fixtures' as a list of (fixture id, "setup" or "teardown", wall seconds, CPU seconds), and
# the phase's own CPU seconds (its wall is the report's duration). pytest serialises a
# report's extra attributes with it, so xdist's controller receives them as they were set.
_FIXTURE_TIMES = "trainparity_fixture_seconds"
_PHASE_CPU = "trainparity_phase_cpu_seconds"


@dataclass(frozen=True)
class Overrun:
    """One test or fixture past the budget."""

    key: str  # what budget_exceptions.py lists: a test's node id, or "file::fixture name"
    description: str  # what the summary prints
    seconds: float  # CPU seconds, what is judged
    wall: float  # wall seconds, printed beside them


@dataclass
class _Times:
    """Wall and CPU seconds, added up."""

    wall: float = 0.0
    cpu: float = 0.0

    def add(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


def cpu_seconds() -> float:
    """The CPU this process used so far, with every child it has waited for (and theirs)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


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
        # per fixture setup in progress the times of fixtures set up inside it, and the CPU
        # seconds of the phase that ended last.
        self._phase_fixtures: list[tuple[str, str, float, float]] = []
        self._nested: list[_Times] = []
        self._phase_cpu = 0.0
        self._keys: dict[pytest.FixtureDef, str] = {}
        self._root = config.rootpath.resolve()
        # Judging: each test's own times (its phases less its fixtures'), the overruns,
        # and the most CPU seen per key (to tell which exceptions are no longer needed).
        self._own: dict[str, _Times] = {}
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
        teardown_started: list[tuple[float, float]] = []
        # Finalizers run last-registered first. This one, registered before the fixture's
        # own code runs, ends after the fixture's teardown; the one registered after its
        # code ran starts before it (and after the fixtures that depend on it are torn down).
        fixturedef.addfinalizer(lambda: self._teardown_ended(key, teardown_started))
        self._nested.append(_Times())
        start, start_cpu = time.perf_counter(), cpu_seconds()
        try:
            return (yield)
        finally:
            wall, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
            inner = self._nested.pop()
            if self._nested:
                self._nested[-1].add(wall, cpu)
            self._phase_fixtures.append((key, "setup", wall - inner.wall, cpu - inner.cpu))
            fixturedef.addfinalizer(
                lambda: teardown_started.append((time.perf_counter(), cpu_seconds()))
            )

    def _teardown_ended(self, key: str, started: list[tuple[float, float]]) -> None:
        if started:
            start, start_cpu = started.pop()
            wall, cpu = time.perf_counter() - start, cpu_seconds() - start_cpu
            self._phase_fixtures.append((key, "teardown", wall, cpu))

    def _measured_phase(self) -> Generator[None, object, object]:
        start_cpu = cpu_seconds()
        try:
            return (yield)
        finally:
            self._phase_cpu = cpu_seconds() - start_cpu

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._measured_phase())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        return (yield from self._measured_phase())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        return (yield from self._measured_phase())

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        setattr(report, _FIXTURE_TIMES, self._phase_fixtures)
        setattr(report, _PHASE_CPU, self._phase_cpu)
        self._phase_fixtures = []
        self._phase_cpu = 0.0
        return report

    # Judging.

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.judges:
            return
        fixtures = getattr(report, _FIXTURE_TIMES, None) or []
        for key, action, wall, cpu in fixtures:
            description = f"fixture {key} ({action} in {report.nodeid})"
            self._measured(key, description, cpu, wall)
        own_wall = report.duration - sum(entry[2] for entry in fixtures)
        own_cpu = (getattr(report, _PHASE_CPU, None) or 0.0) - sum(entry[3] for entry in fixtures)
        self._own.setdefault(report.nodeid, _Times()).add(max(own_wall, 0.0), max(own_cpu, 0.0))

    def _measured(self, key: str, description: str, cpu: float, wall: float) -> None:
        self._longest[key] = max(cpu, self._longest.get(key, 0.0))
        if cpu > self.budget:
            self._overruns.append(Overrun(key, description, cpu, wall))

    def _judge_tests(self) -> None:
        """Once every phase is in: each test's own time against the budget."""
        if not self._tests_judged:
            self._tests_judged = True
            for nodeid, own in self._own.items():
                description = f"test {nodeid} (setup, call and teardown)"
                self._measured(nodeid, description, own.cpu, own.wall)

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
        terminalreporter.section(f"time budget: {self.budget:g} s of CPU", red=bool(unlisted))
        if not self._overruns:
            write(f"every test and fixture used at most {self.budget:g} s of CPU")
        for overrun in sorted(self._overruns, key=lambda overrun: -overrun.seconds):
            reason = self._listed(overrun.key)
            verdict = f"listed: {reason}" if reason is not None else "NOT LISTED"
            write(
                f"{overrun.seconds:7.1f} s CPU {overrun.wall:7.1f} s wall  "
                f"{overrun.description}: {verdict}"
            )
        if unlisted:
            write(
                f"{len(unlisted)} past the budget and not listed: the session fails. Make each "
                "smaller (CONTRIBUTING.md, 'Keeping a test inside the budget'), or, where it "
                f"cannot shrink, add its key (the id before the parenthesis) to {EXCEPTIONS_FILE} "
                "with the reason"
            )
        # Not a failure (an entry may come under by a little): a hint that the table may shrink.
        for key in sorted(self.exceptions):
            seen = [
                seconds
                for measured, seconds in self._longest.items()
                if measured == key or measured.startswith(key + "[")
            ]
            if seen and max(seen) <= self.budget:
                write(
                    f"listed but within the budget this time ({max(seen):.1f} s of CPU): {key} "
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
