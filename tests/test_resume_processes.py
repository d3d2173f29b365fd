"""check_resume at the process level: hangs, crashes, leaked grandchildren, Ctrl-C, concurrency.

The tests of how children stop and fail run in both start modes (both_start_modes,
tests/conftest.py); concurrency and progress events, which do not depend on how a child
started, run warm like the rest of the suite.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainparity import Outcome, check_resume

from tests.fixtures.resume_process_cases import MARKER
from tests.helpers import descendants

REPO = Path(__file__).resolve().parent.parent


def _marked_processes() -> list[int]:
    """Live (non-zombie) processes whose argv carries the test marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if MARKER.encode() in argv and state != "Z":
            found.append(int(entry.name))
    return found


def _wait_until_gone(timeout: float = 10.0, among: set[int] | None = None) -> list[int]:
    """The marked processes still alive after `timeout` (only those in `among`, when given)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [pid for pid in _marked_processes() if among is None or pid in among]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


@pytest.mark.both_start_modes
def test_hanging_child_times_out_as_error_naming_the_phase(tmp_path, start_mode):
    result = check_resume(
        "tests.fixtures.resume_process_cases:HangingCase",
        cwd=REPO,
        timeout=1.0,
        temporary_root=tmp_path,
    )
    assert result.outcome is Outcome.ERROR
    assert result.message.splitlines()[0] == "baseline_a child exceeded timeout"
    if start_mode == "warm":  # forked, though its server took longer to import than 1 s
        assert "baseline_a" in result.environment["child_start"]["warm"]
    assert _wait_until_gone() == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.both_start_modes
def test_segfaulting_child_is_an_error_with_its_signal(tmp_path):
    result = check_resume(
        "tests.fixtures.resume_process_cases:SegfaultCase", cwd=REPO, temporary_root=tmp_path
    )
    assert result.outcome is Outcome.ERROR
    assert result.message.splitlines()[0] == (
        f"baseline_a child exited with status -{signal.SIGSEGV.value}"
    )
    assert result.processes[0].phase == "baseline_a"
    assert result.processes[0].signal == signal.SIGSEGV


@pytest.mark.both_start_modes
def test_grandchild_ignoring_sigterm_does_not_survive_the_check(tmp_path, start_mode):
    result = check_resume(
        "tests.fixtures.resume_process_cases:GrandchildCase",
        cwd=REPO,
        timeout=1.5,
        temporary_root=tmp_path,
    )
    assert result.outcome is Outcome.ERROR
    assert "exceeded timeout" in result.message
    if start_mode == "warm":
        assert "baseline_a" in result.environment["child_start"]["warm"]
    assert _wait_until_gone() == []


_INTERRUPT_DRIVER = """
import signal
import sys
from pathlib import Path
from trainparity import check_resume
signal.signal(signal.SIGINT, signal.default_int_handler)  # even if inherited as ignored
try:
    check_resume("tests.fixtures.resume_process_cases:HangingCase", cwd=Path(sys.argv[1]),
                 temporary_root=Path(sys.argv[2]), progress=True)
except KeyboardInterrupt:
    print("KeyboardInterrupt re-raised", flush=True)
    raise
"""


@pytest.mark.both_start_modes
def test_ctrl_c_stops_every_child_and_removes_the_temporary_directory(tmp_path):
    scratch = tmp_path / "scratch"
    driver = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPT_DRIVER, str(REPO), str(scratch)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Only this driver's children count: another module's test (on the other xdist worker)
    # may have children with the same marker running at the same time.
    ours: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(ours) < 3 and time.monotonic() < deadline:
            ours = set(_marked_processes()) & descendants(driver.pid)
            time.sleep(0.1)
        assert len(ours) >= 3, "the three concurrent training children never started"
        driver.send_signal(signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert "KeyboardInterrupt re-raised" in stdout, stderr
    assert driver.returncode != 0
    assert _wait_until_gone(among=ours) == []
    assert list(scratch.iterdir()) == []


def _comparison_part(result) -> str:
    report = result.to_dict()
    # environment: the children's thread count is the fair share over those that run at once.
    for volatile in (
        "processes",
        "timing_seconds",
        "snapshot_ipc_bytes",
        "checkpoint_max_bytes",
        "environment",
    ):
        report.pop(volatile)
    return json.dumps(report, sort_keys=True)


@pytest.mark.parametrize("case", ["CleanCase", "FaultyCase"])
def test_parallel_and_sequential_runs_give_the_same_comparison_report(case, tmp_path):
    spec = f"trainparity.quickstarts.resume:{case}"
    concurrent = check_resume(spec, parallel=True, temporary_root=tmp_path)
    sequential = check_resume(spec, parallel=False, temporary_root=tmp_path)
    assert _comparison_part(concurrent) == _comparison_part(sequential)
    assert concurrent.environment["child_threads"]["concurrent_children"] == 3
    assert sequential.environment["child_threads"]["concurrent_children"] == 1
    assert [p.phase for p in sequential.processes] == [
        "baseline_a",
        "baseline_b",
        "candidate_split",
        "candidate_resume",
    ]


def test_progress_callback_sees_every_phase_start_and_end(tmp_path):
    events = []
    result = check_resume(
        "trainparity.quickstarts.resume:CleanCase", temporary_root=tmp_path, progress=events.append
    )
    assert result.outcome is Outcome.PASS
    seen = {(event.phase, event.kind) for event in events}
    for phase in ("baseline_a", "baseline_b", "candidate_split", "candidate_resume"):
        assert (phase, "start") in seen and (phase, "end") in seen
    for phase in ("baseline_a", "baseline_b", "candidate_resume"):
        assert (f"snapshot_{phase}", "end") in seen
    ends = [event for event in events if event.kind == "end"]
    assert all(event.elapsed_seconds is not None and event.elapsed_seconds >= 0 for event in ends)


def test_progress_true_prints_lines_to_stderr(tmp_path, capfd):
    check_resume("trainparity.quickstarts.resume:CleanCase", temporary_root=tmp_path, progress=True)
    err = capfd.readouterr().err
    assert "trainparity: baseline_a started" in err
    assert "trainparity: candidate_resume finished in" in err


def test_bad_progress_argument_is_rejected_before_anything_runs():
    with pytest.raises(TypeError, match="progress must be"):
        check_resume("trainparity.quickstarts.resume:CleanCase", progress="yes")
