"""The suite's time budget (tests/time_budget.py), run inside pytester sessions.

Each inner test or fixture that must go past the budget spends 0.2 s of CPU (a loop that
runs until the process's CPU clock has advanced that much) against a budget of 0.1 s: past
it on any machine, however loaded. Nothing here asserts that anything is fast.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tests import time_budget
from tests.budget_exceptions import EXCEPTIONS

pytest_plugins = ["pytester"]

REPOSITORY = Path(__file__).resolve().parent.parent
BUDGET = "0.1"
SPEND = 0.2
# The inner modules' way of spending SPEND seconds of CPU, in this process or in a child.
_SPEND = f"""
import subprocess
import sys
import time

def spend(seconds={SPEND}):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass

def spend_in_a_child():
    code = "import time\\nstart = time.process_time()\\nwhile time.process_time() - start < {SPEND}: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
"""


def _conftest(exceptions: dict[str, str]) -> str:
    """An inner conftest that measures its session against `exceptions`, not the suite's table."""
    return (
        "from tests.time_budget import register\n"
        f"EXCEPTIONS = {exceptions!r}\n"
        "def pytest_configure(config):\n"
        "    register(config, EXCEPTIONS)\n"
    )


SLOW_CALLS = (
    _SPEND
    + """
import pytest

def test_slow_call():
    spend()

@pytest.mark.parametrize("n", [1, 2])
def test_slow_parametrized(n):
    spend()
"""
)

SLOW_FIXTURES = (
    _SPEND
    + """
import pytest

@pytest.fixture(scope="module")
def slow_setup():
    spend()

@pytest.fixture(scope="module")
def slow_teardown():
    yield
    spend()

def test_first(slow_setup, slow_teardown):
    pass

def test_second(slow_setup, slow_teardown):
    pass
"""
)


def _lines(result: pytest.RunResult, *patterns: str) -> None:
    """Each pattern matches a line of the output, in any order (the summary sorts by time)."""
    for pattern in patterns:
        result.stdout.fnmatch_lines([pattern])


@pytest.fixture
def budget(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(time_budget.VARIABLE, BUDGET)
    return BUDGET


def test_a_test_past_the_budget_and_not_listed_fails_the_session(pytester, budget):
    pytester.makeconftest(_conftest({}))
    pytester.makepyfile(test_slow=SLOW_CALLS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=3)  # every test passed; the budget alone fails the session
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _lines(
        result,
        "*time budget: 0.1 s of CPU*",
        "*s wall  test test_slow.py::test_slow_call (setup, call and teardown): NOT LISTED",
        "*s wall  test test_slow.py::test_slow_parametrized[[]1[]] (*): NOT LISTED",
        "*s wall  test test_slow.py::test_slow_parametrized[[]2[]] (*): NOT LISTED",
        "3 past the budget and not listed: the session fails.*tests/budget_exceptions.py*",
    )


def test_a_listed_test_past_the_budget_passes_with_its_reason(pytester, budget):
    # A test's id without its parameters lists every parametrization.
    listed = {
        "test_slow.py::test_slow_call": "one reason",
        "test_slow.py::test_slow_parametrized": "another reason",
    }
    pytester.makeconftest(_conftest(listed))
    pytester.makepyfile(test_slow=SLOW_CALLS)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.OK
    _lines(
        result,
        "*s wall  test test_slow.py::test_slow_call (*): listed: one reason",
        "*s wall  test test_slow.py::test_slow_parametrized[[]1[]] (*): listed: another reason",
    )
    result.stdout.no_fnmatch_line("*NOT LISTED*")


def test_one_parametrization_listed_leaves_the_others_judged(pytester, budget):
    pytester.makeconftest(_conftest({"test_slow.py::test_slow_parametrized[1]": "only one"}))
    pytester.makepyfile(test_slow=SLOW_CALLS)
    result = pytester.runpytest("-k", "parametrized")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _lines(
        result,
        "*test_slow_parametrized[[]1[]] (*): listed: only one",
        "*test_slow_parametrized[[]2[]] (*): NOT LISTED",
    )


def test_a_module_fixture_is_charged_as_itself_in_the_test_that_set_it_up(pytester, budget):
    pytester.makeconftest(_conftest({}))
    pytester.makepyfile(test_fixtures=SLOW_FIXTURES)
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _lines(
        result,
        "*s wall  fixture test_fixtures.py::slow_setup "
        "(setup in test_fixtures.py::test_first): NOT LISTED",
        "*s wall  fixture test_fixtures.py::slow_teardown "
        "(teardown in test_fixtures.py::test_second): NOT LISTED",
    )


def test_listed_fixtures_pass(pytester, budget):
    listed = {
        "test_fixtures.py::slow_setup": "set-up reason",
        "test_fixtures.py::slow_teardown": "tear-down reason",
        # Not asserted fast: were a test's own overhead past 0.1 s, it would not fail this.
        "test_fixtures.py::test_first": "-",
        "test_fixtures.py::test_second": "-",
    }
    pytester.makeconftest(_conftest(listed))
    pytester.makepyfile(test_fixtures=SLOW_FIXTURES)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.OK
    _lines(result, "*fixture test_fixtures.py::slow_setup (*): listed: set-up reason")


def test_a_fixture_requested_inside_another_is_charged_to_itself(pytester, budget):
    pytester.makeconftest(_conftest({"test_nested.py::test_it": "-"}))
    pytester.makepyfile(
        test_nested=_SPEND
        + textwrap.dedent(
            """
        import pytest

        @pytest.fixture
        def inner():
            spend()

        @pytest.fixture
        def outer(request):
            request.getfixturevalue("inner")

        def test_it(outer):
            pass
        """
        )
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _lines(result, "*fixture test_nested.py::inner (setup in *::test_it): NOT LISTED")
    # That the outer fixture is not charged the inner one's time too is not asserted: it
    # would take the outer one's own time to be under 0.1 s, and nothing here asserts speed.


def test_cpu_a_child_spent_is_charged_to_the_test_that_waited_for_it(pytester, budget):
    pytester.makeconftest(_conftest({}))
    pytester.makepyfile(test_child=_SPEND + "\ndef test_in_a_child():\n    spend_in_a_child()\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _lines(result, "*s CPU *s wall  test test_child.py::test_in_a_child (*): NOT LISTED")


def test_waiting_is_not_charged_so_a_busy_machine_cannot_fail_the_budget(pytester, budget):
    # A wait stands for what a busy machine adds to a test's wall time: hours of it would
    # cost no CPU. (The test's own few milliseconds of CPU stay far below 0.1 s.)
    pytester.makeconftest(_conftest({}))
    pytester.makepyfile(test_wait="import time\n\ndef test_waits():\n    time.sleep(0.3)\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.OK
    _lines(
        result, "*time budget: 0.1 s of CPU*", "every test and fixture used at most 0.1 s of CPU"
    )


def test_under_xdist_the_controller_sees_what_the_workers_measured(pytester, budget, monkeypatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTHONPATH", str(REPOSITORY))  # the subprocesses import tests.time_budget
    pytester.makeconftest(_conftest({"test_slow.py::test_slow_call": "listed in the workers' run"}))
    pytester.makepyfile(test_slow=SLOW_CALLS, test_fixtures=SLOW_FIXTURES)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadfile", "-p", "xdist")
    result.assert_outcomes(passed=5)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    _lines(
        result,
        "*fixture test_fixtures.py::slow_setup (setup in test_fixtures.py::test_first)*",
        "*fixture test_fixtures.py::slow_teardown (teardown in *::test_second): NOT LISTED",
    )
    _lines(result, "*test test_slow.py::test_slow_call (*): listed: listed in*")


def test_without_the_variable_there_is_no_budget(pytester, monkeypatch):
    monkeypatch.delenv(time_budget.VARIABLE, raising=False)
    pytester.makeconftest(_conftest({}))
    pytester.makepyfile(test_slow=SLOW_CALLS)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*time budget*")


def test_a_budget_that_is_not_a_positive_number_is_refused(pytester, monkeypatch):
    monkeypatch.setenv(time_budget.VARIABLE, "sixty")
    pytester.makeconftest(_conftest({}))
    pytester.makepyfile(test_slow=SLOW_CALLS)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*TRAINPARITY_TEST_BUDGET_SECONDS='sixty'*positive number*"])


@pytest.mark.parametrize("key", sorted(EXCEPTIONS))
def test_each_exception_names_a_test_or_fixture_that_exists_and_says_why(key):
    path, _, name = key.partition("::")
    name = name.partition("[")[0]
    source = REPOSITORY / path
    assert source.is_file(), f"{key}: no file {path} (the table's keys are relative to the root)"
    functions = {
        node.name
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    assert name in functions, f"{key}: {path} defines no test or fixture {name!r}"
    assert len(EXCEPTIONS[key].split()) >= 10, f"{key}: say why it cannot shrink"
