"""SIGTERM and SIGHUP during a check (real processes, real signals), and stale run directories."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainparity import Outcome, check_resume
from trainparity._internal.processes.run_directory import (
    OWNER_FILE,
    PROCESS_RESUME_PREFIX,
    ProcessIdentity,
    remove_stale_run_directories,
    run_directory,
    write_owner_marker,
)
from trainparity._internal.processes.termination import terminating_signals_unwind

from tests.fixtures.resume_process_cases import MARKER

# Each test twice: its checks started fresh, then warm (tests/conftest.py).
pytestmark = pytest.mark.both_start_modes

REPOSITORY = Path(__file__).resolve().parent.parent
QUICK_ERROR_CASE = "tests.fixtures.resume_process_cases:SegfaultCase"


# Process trees ---------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int, int, str] | None:
    """(ppid, pgid, start time, state) of a process, None when there is none."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 1 :].split()
    return int(fields[1]), int(fields[2]), int(fields[19]), fields[0]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _descendants(root: int) -> dict[int, tuple[int, int]]:
    """{pid: (pgid, start time)} of every live descendant of `root`."""
    children: dict[int, list[int]] = {}
    identity = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            children.setdefault(stat[0], []).append(int(entry.name))
            identity[int(entry.name)] = (stat[1], stat[2])
    found, pending = {}, [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found[child] = identity[child]
            pending.append(child)
    return found


def _survivors(pids: dict[int, tuple[int, int]], pgids: set[int]) -> list[int]:
    """Live (non-zombie) processes that are one of `pids` or belong to one of `pgids`."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or (stat := _stat(int(entry.name))) is None:
            continue
        pid, (_, pgid, start_time, state) = int(entry.name), stat
        if state != "Z" and (pgid in pgids or pids.get(pid, (None, None))[1] == start_time):
            alive.append(pid)
    return alive


def _start_and_watch(argv: list[str], token: str, count: int, scratch: Path) -> tuple:
    """Start a driver in its own session; return it with every process of its tree seen once
    `count` descendants carry `token` in their argv."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(scratch)}
    driver = subprocess.Popen(
        argv,
        cwd=REPOSITORY,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _, pgid, start_time, _ = _stat(driver.pid)
    seen = {driver.pid: (pgid, start_time)}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and driver.poll() is None:
        seen.update(_descendants(driver.pid))
        marked = [pid for pid in seen if token.encode() in _cmdline(pid)]
        if len(marked) >= count:
            break
        time.sleep(0.1)
    else:
        driver.kill()
        stdout, stderr = driver.communicate()
        pytest.fail(f"the driver's children never started:\n{stdout}\n{stderr}")
    return driver, seen


def _stop(driver: subprocess.Popen, signum: int, seen: dict) -> tuple[int, str]:
    try:
        driver.send_signal(signum)
        stdout, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    return driver.returncode, stdout + stderr


def _assert_nothing_survives(seen: dict[int, tuple[int, int]]) -> None:
    pgids = {pgid for pgid, _ in seen.values()}
    deadline = time.monotonic() + 10
    while (alive := _survivors(seen, pgids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive == [], f"processes of the check survived: {alive}"


@pytest.fixture
def default_termination_signals():
    """SIGTERM and SIGHUP at their default disposition for the test, as they were afterwards."""
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    for signum in saved:
        signal.signal(signum, signal.SIG_DFL)
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


# Signals delivered to a running check -------------------------------------------------------


@pytest.mark.parametrize(
    ("signum", "handler", "status"),
    [
        (signal.SIGTERM, "default", -signal.SIGTERM),
        (signal.SIGHUP, "default", -signal.SIGHUP),
        # A handler of the user's own is left in place; its SystemExit unwinds the same way.
        (signal.SIGTERM, "exit-7", 7),
    ],
    ids=["SIGTERM", "SIGHUP", "user-handler"],
)
def test_signal_during_check_resume_stops_every_child_and_removes_the_directory(
    tmp_path, signum, handler, status
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [sys.executable, "-m", "tests.fixtures.signal_driver", "resume", str(scratch), handler]
    driver, seen = _start_and_watch(argv, MARKER, 3, scratch)
    assert any(path.name.startswith(PROCESS_RESUME_PREFIX) for path in scratch.iterdir())
    returncode, output = _stop(driver, signum, seen)
    assert returncode == status, output
    assert "returned" not in output
    _assert_nothing_survives(seen)
    assert list(scratch.iterdir()) == []


def test_sigterm_during_check_accumulation_stops_every_worker_and_removes_the_directory(
    tmp_path,
):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [
        *(sys.executable, "-m", "tests.fixtures.signal_driver"),
        *("accumulation", str(scratch), "default"),
    ]
    driver, seen = _start_and_watch(argv, "HangingAccumulationCase", 3, scratch)
    returncode, output = _stop(driver, signal.SIGTERM, seen)
    assert returncode == -signal.SIGTERM, output
    _assert_nothing_survives(seen)
    assert list(scratch.iterdir()) == []


def test_sigterm_to_the_cli_gives_status_143_to_its_shell(tmp_path, default_termination_signals):
    # The fixture matters when the suite runs in the background: a shell cannot
    # undo a signal it inherited as ignored, and its children would inherit that.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # The shell reports how its child ended the conventional way: 128 + the signal.
    script = (
        '"$0" -m trainparity resume '
        "tests.fixtures.resume_process_cases:HangingCase --timeout 120; "
        'echo "status $?"'
    )
    driver, seen = _start_and_watch(["sh", "-c", script, sys.executable], MARKER, 3, scratch)
    cli = next(pid for pid in seen if b"trainparity\0resume" in _cmdline(pid) and pid != driver.pid)
    os.kill(cli, signal.SIGTERM)
    stdout, stderr = driver.communicate(timeout=60)
    assert "status 143" in stdout, stdout + stderr
    _assert_nothing_survives(seen)
    assert list(scratch.iterdir()) == []


# The scope's handlers --------------------------------------------------------------------


def test_handlers_are_installed_only_inside_and_only_over_the_default(
    default_termination_signals,
):
    def own_handler(signum, frame):
        raise AssertionError("not expected to run")

    signal.signal(signal.SIGHUP, own_handler)
    with terminating_signals_unwind():
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        assert signal.getsignal(signal.SIGHUP) is own_handler
        installed = signal.getsignal(signal.SIGTERM)
        with terminating_signals_unwind():  # nested: the outer scope's handler stays
            assert signal.getsignal(signal.SIGTERM) is installed
        assert signal.getsignal(signal.SIGTERM) is installed
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGHUP) is own_handler


_SELF_SIGNAL = """
import os, signal, sys, time
from pathlib import Path
from trainparity._internal.processes.termination import terminating_signals_unwind
signal.signal(signal.SIGTERM, signal.SIG_DFL)
marks = Path(sys.argv[1])
with terminating_signals_unwind():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        marks.joinpath("not interrupted").touch()
    finally:
        os.kill(os.getpid(), signal.SIGTERM)  # a second one must not cut the cleanup short
        marks.joinpath("cleaned up").touch()
marks.joinpath("survived").touch()
"""


def test_a_signal_unwinds_the_scope_then_kills_the_process(tmp_path):
    driver = subprocess.run(
        [sys.executable, "-c", _SELF_SIGNAL, str(tmp_path)], capture_output=True, timeout=60
    )
    assert driver.returncode == -signal.SIGTERM, driver.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["cleaned up"]


# Stale run directories ----------------------------------------------------------------------


def _marked_directory(root: Path, name: str, owner: ProcessIdentity) -> Path:
    directory = root / name
    directory.mkdir()
    write_owner_marker(directory, owner)
    (directory / "checkpoint.bin").write_bytes(b"\0" * 64)
    return directory


@pytest.fixture
def dead_owner() -> ProcessIdentity:
    """The identity of a process that has exited and been reaped."""
    sleeper = subprocess.Popen(["sleep", "30"])
    _, _, start_time, _ = _stat(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    me = ProcessIdentity.of_this_process()
    return dataclasses.replace(me, pid=sleeper.pid, start_time=start_time)


def test_stale_directories_of_gone_owners_are_removed_and_nothing_else(tmp_path, dead_owner):
    me = ProcessIdentity.of_this_process()
    assert me is not None
    stale = [
        _marked_directory(tmp_path, "trainparity-process-dead", dead_owner),
        _marked_directory(tmp_path, "trainparity-accum-dead", dead_owner),
        # The pid now belongs to another process (ours), started at another time.
        _marked_directory(
            tmp_path, "trainparity-process-reused", dataclasses.replace(me, start_time=0)
        ),
        _marked_directory(
            tmp_path, "trainparity-process-rebooted", dataclasses.replace(me, boot_id="other")
        ),
    ]
    kept = [
        _marked_directory(tmp_path, "trainparity-process-live", me),
        _marked_directory(
            tmp_path,
            "trainparity-process-other-host",
            dataclasses.replace(dead_owner, host="elsewhere", boot_id="other"),
        ),
        _marked_directory(
            tmp_path,
            "trainparity-process-other-namespace",
            dataclasses.replace(dead_owner, pid_namespace="pid:[1]"),
        ),
        _marked_directory(tmp_path, "not-ours-dead", dead_owner),
    ]
    unmarked = tmp_path / "trainparity-process-unmarked"
    unmarked.mkdir()
    garbled = tmp_path / "trainparity-process-garbled"
    garbled.mkdir()
    (garbled / OWNER_FILE).write_text('{"format": "trainparity-run-owner/1", "pid": "1"}')
    linked_marker = tmp_path / "trainparity-process-linked-marker"
    linked_marker.mkdir()
    (linked_marker / OWNER_FILE).symlink_to(stale[0] / OWNER_FILE)
    linked_directory = tmp_path / "trainparity-process-link"
    linked_directory.symlink_to(stale[1], target_is_directory=True)
    kept += [unmarked, garbled, linked_marker, linked_directory]

    assert sorted(remove_stale_run_directories(tmp_path)) == sorted(stale)
    assert sorted(tmp_path.iterdir()) == sorted(kept)


def test_work_dir_gets_no_marker_and_loses_a_leftover_one(tmp_path, dead_owner):
    work_dir = _marked_directory(tmp_path, "trainparity-process-adopted", dead_owner)
    with run_directory(work_dir, None, PROCESS_RESUME_PREFIX) as (root, managed):
        assert (root, managed) == (work_dir, False)
        assert not (root / OWNER_FILE).exists()
    assert remove_stale_run_directories(tmp_path) == []
    assert (work_dir / "checkpoint.bin").exists()


def test_a_new_check_removes_the_directory_of_a_sigkilled_one(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    argv = [sys.executable, "-m", "tests.fixtures.signal_driver", "resume", str(scratch), "default"]
    driver, seen = _start_and_watch(argv, MARKER, 3, scratch)
    try:
        # The run directory and the children's TMPDIR (scratch is the driver's TMPDIR too).
        left_behind = sorted(scratch.iterdir())
        assert [path.name.split("-")[1] for path in left_behind] == ["process", "tmp"]
        assert all((path / OWNER_FILE).is_file() for path in left_behind)
    finally:
        _stop(driver, signal.SIGKILL, seen)
    _assert_nothing_survives(seen)  # the children die with their parent (PR_SET_PDEATHSIG)
    assert all(path.is_dir() for path in left_behind)
    live = _marked_directory(scratch, "trainparity-process-live", ProcessIdentity.of_this_process())

    result = check_resume(QUICK_ERROR_CASE, cwd=REPOSITORY, temporary_root=scratch)

    assert result.outcome is Outcome.ERROR
    assert list(scratch.iterdir()) == [live]
