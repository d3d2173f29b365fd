"""pytest plugin: a work-dir fixture that keeps run logs of failing tests, result-aware assert messages, a marker.

Registered through the `pytest11` entry point, so installing trainparity is
enough. Everything trainparity-specific is imported inside the hooks.
"""

from __future__ import annotations

import inspect
import re
import shutil
from collections.abc import Iterator, Mapping
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

_WORKDIR = pytest.StashKey[Path]()
_TEST_FAILED = pytest.StashKey[bool]()
# Work dirs of the running test (a pytest process runs one test at a time), for assert messages.
_active_workdirs: list[Path] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "trainparity: the test runs trainparity checks, which start training processes "
        "(select with -m trainparity, skip with -m 'not trainparity')",
    )


@pytest.fixture
def trainparity_workdir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A `work_dir` for a check: kept, and named in the failure report, when the test fails.

    Pass it as `check_resume(case, work_dir=trainparity_workdir)`: every phase's
    stdout/stderr logs and checkpoints land there. It is removed when the test
    passes.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:60]
    path = tmp_path_factory.mktemp(f"trainparity-{name}", numbered=True)
    request.node.stash[_WORKDIR] = path
    _active_workdirs.append(path)
    try:
        yield path
    finally:
        _active_workdirs.remove(path)
        if not request.node.stash.get(_TEST_FAILED, False):
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def trainparity_shared_warm_servers() -> Iterator[object]:
    """Warm checks of the whole session share their warm servers (`shared_warm_servers()`).

    Use it from a session-scoped autouse fixture of your conftest.py, so that
    checks run by module-scoped fixtures share them too. It changes nothing for
    fresh checks; the servers stop when the session ends.
    """
    from trainparity._internal.processes.warm.pool import shared_warm_servers

    with shared_warm_servers() as servers:
        yield servers


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    workdir = item.stash.get(_WORKDIR, None)
    if workdir is None or not report.failed:
        return
    item.stash[_TEST_FAILED] = True
    report.sections.append(("trainparity", f"run logs kept in {workdir}"))


def pytest_assertrepr_compare(
    config: pytest.Config, op: str, left: object, right: object
) -> list[str] | None:
    """Explain `assert result.outcome is Outcome.PASS`: outcome, message, first divergence, logs."""
    if op not in ("is", "is not", "==", "!=") or not (_is_outcome(left) or _is_outcome(right)):
        return None
    actual = left if _is_outcome(left) else right
    results = [
        value for value in _asserting_locals() if _is_result(value) and value.outcome is actual
    ]
    if not results:
        return None
    lines = [f"{_plain(left)} {op} {_plain(right)}"]
    for result in results:
        lines.extend(_explanation(result))
    return lines


def _is_outcome(value: object) -> bool:
    """Whether `value` is an Outcome, of this import of trainparity or of an earlier one.

    Checked by the class's module and name, not its identity: a module imported again (a
    notebook's autoreload, pytester's in-process runs, which drop the modules a run imported)
    makes a second Outcome class while results made before still hold the first.
    """
    from trainparity._internal.outcomes import Outcome

    kind = type(value)
    return isinstance(value, Enum) and (kind.__module__, kind.__qualname__) == (
        Outcome.__module__,
        Outcome.__qualname__,
    )


def _plain(value: object) -> str:
    return str(value) if isinstance(value, str) else repr(value)


def _asserting_locals() -> list[Any]:
    """The local values of the frame whose assert is being explained (found above pytest's helper)."""
    frame = inspect.currentframe()
    try:
        while frame is not None and frame.f_code.co_name != "_call_reprcompare":
            frame = frame.f_back
        if frame is None or frame.f_back is None:
            return []
        return list(frame.f_back.f_locals.values())
    finally:
        del frame


def _is_result(value: object) -> bool:
    return (
        callable(getattr(value, "to_dict", None))
        and hasattr(value, "message")
        and hasattr(value, "outcome")
    )


def _explanation(result: Any) -> list[str]:
    """The finding first (pytest keeps about eight lines or 640 characters without -vv): where
    it differs with both values, then the verdict's message, the differing elements, the logs,
    and the whole report."""
    from trainparity._internal.reports.sections.differences import window_rows
    from trainparity._internal.reports.terminal_text import printable
    from trainparity._internal.reports.text_views import text_report

    report = result.to_dict()
    lines = _finding(report)
    lines.append(f"{type(result).__name__}: {result.outcome}: {result.message}")
    first = report.get("primary_difference")
    if isinstance(first, Mapping):
        lines.extend(f"  {label}: {text}" for label, text in window_rows(report, first["path"]))
    for workdir in _active_workdirs:
        logs = sorted(str(path.relative_to(workdir)) for path in workdir.rglob("*stderr.log"))
        if logs:
            lines.append(f"run logs in {workdir}: {', '.join(logs)}")
    # The whole report after the essentials (pytest shows it with -vv or on CI).
    lines.extend(text_report(report).splitlines()[1:])
    return [printable(line) for line in lines]


def _finding(report: Mapping[str, Any]) -> list[str]:
    """One line: where the check first differs (step or phase, path) and both values there."""
    from trainparity._internal.reports.sections.differences import value_window

    first = report.get("primary_difference")
    if isinstance(first, Mapping):
        step, phase = report.get("first_divergent_step"), report.get("first_observed_phase")
        where = f" at step {step}" if step is not None else f" in {phase}" if phase else ""
        window = value_window(report, first["path"])
        if window is None:
            values = f"{first['baseline']} in the baseline, {first['candidate']} in the candidate"
        else:
            # The first element that differs, not the tensor's first four (often equal).
            offset = window["index"] - window["start"]
            values = (
                f"element {window['index']} (flat) is {window['baseline'][offset]!r} in the "
                f"baseline, {window['candidate'][offset]!r} in the candidate"
            )
        if first.get("max_abs_error") is not None:
            values += f"; max abs error {first['max_abs_error']:.4g}"
        return [f"first divergence{where}: {first['path']} ({first['reason']}): {values}"]
    violation = report.get("first_violation")
    if isinstance(violation, Mapping):
        return [
            f"first violation: {violation['path']} ({violation['kind']}) sample "
            f"{violation['sample_id']!r} rank {violation['rank']} epoch {violation['epoch']} "
            f"position {violation['position']}"
        ]
    return []
