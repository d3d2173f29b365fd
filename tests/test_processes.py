"""run_children: timeouts, kill escalation, group cleanup, launch errors, events."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from trainparity._internal.processes.group import (
    ChildLaunchError,
    ChildResult,
    ChildSpec,
    run_children,
)

CHILDREN = Path(__file__).resolve().parent / "fixtures" / "spawn_children"
_probe_spec = importlib.util.spec_from_file_location("spawn_probe", CHILDREN / "probe.py")
probe = importlib.util.module_from_spec(_probe_spec)
_probe_spec.loader.exec_module(probe)

ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


@pytest.fixture
def new_zombies():
    """This test's unreaped children: zombies of this process that were not there when it began.

    A zombie left by an earlier test in the same worker is that test's fault, not this one's
    (the suite's conftest names such tests in a warning).
    """
    earlier = set(probe.zombie_children())
    return lambda: sorted(set(probe.zombie_children()) - earlier)


def spec(tmp_path: Path, name: str, script: str, *args: str, **overrides) -> ChildSpec:
    fields = dict(
        name=name,
        argv=[sys.executable, str(CHILDREN / script), *args],
        cwd=tmp_path,
        env=ENV,
        stdout_path=tmp_path / f"{name}.out",
        stderr_path=tmp_path / f"{name}.err",
    )
    fields.update(overrides)
    return ChildSpec(**fields)


def test_normal_exit_and_nonzero_exit(tmp_path):
    ok, failing = run_children(
        [spec(tmp_path, "ok", "exit_with.py", "0"), spec(tmp_path, "failing", "exit_with.py", "7")],
        timeout=30,
    )
    assert (ok.name, ok.exit_code, ok.signal, ok.timed_out, ok.succeeded) == (
        "ok",
        0,
        None,
        False,
        True,
    )
    assert (failing.exit_code, failing.signal, failing.succeeded) == (7, None, False)
    assert (tmp_path / "failing.out").read_text() == "to stdout\n"
    assert (tmp_path / "failing.err").read_text() == "to stderr\n"


def test_hanging_child_times_out_and_is_killed_and_reaped(tmp_path, new_zombies):
    (result,) = run_children(
        [spec(tmp_path, "hang", "hang.py", str(tmp_path / "pid"))], timeout=0.5, grace=2
    )
    assert result.timed_out and not result.succeeded
    assert (result.exit_code, result.signal) == (None, signal.SIGTERM)
    assert 0.5 <= result.wall_seconds < 2.5
    assert probe.read_pid_file(tmp_path / "pid", 1) == result.pid
    assert new_zombies() == []
    assert probe.wait_until(lambda: probe.live_group_members(result.pid) == [], 3)


def test_child_ignoring_sigterm_gets_sigkill_after_grace(tmp_path):
    (result,) = run_children(
        [spec(tmp_path, "stubborn", "hang.py", str(tmp_path / "pid"), "ignore-term")],
        timeout=0.5,
        grace=0.5,
    )
    assert result.timed_out
    assert (result.exit_code, result.signal) == (None, signal.SIGKILL)
    assert result.wall_seconds >= 1.0  # timeout + grace: SIGTERM alone did not end it


def test_segfault_is_reported_as_sigsegv(tmp_path):
    (result,) = run_children([spec(tmp_path, "crash", "segfault.py")], timeout=30)
    assert (result.exit_code, result.signal, result.timed_out) == (None, signal.SIGSEGV, False)


def test_flooding_stdout_does_not_deadlock(tmp_path):
    (result,) = run_children([spec(tmp_path, "flood", "flood.py", "200")], timeout=30)
    assert result.exit_code == 0
    assert (tmp_path / "flood.out").stat().st_size == 200 << 20


def test_grandchild_ignoring_sigterm_is_gone_after_normal_exit(tmp_path):
    (result,) = run_children(
        [spec(tmp_path, "leaver", "grandchild.py", str(tmp_path / "gc.pid"), "exit")], timeout=30
    )
    assert result.exit_code == 0
    grandchild = probe.read_pid_file(tmp_path / "gc.pid", 1)
    assert probe.wait_until(lambda: not probe.is_alive(grandchild), 3)
    assert probe.wait_until(lambda: probe.live_group_members(result.pid) == [], 3)


def test_grandchild_ignoring_sigterm_is_gone_after_timeout(tmp_path):
    (result,) = run_children(
        [spec(tmp_path, "hanger", "grandchild.py", str(tmp_path / "gc.pid"), "hang")],
        timeout=1.0,
        grace=3,
    )
    assert result.timed_out and result.signal == signal.SIGTERM
    grandchild = probe.read_pid_file(tmp_path / "gc.pid", 1)
    assert probe.wait_until(lambda: not probe.is_alive(grandchild), 3)
    assert probe.wait_until(lambda: probe.live_group_members(result.pid) == [], 3)


def test_env_is_exactly_the_given_one_and_cwd_is_applied(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    os.environ["TRAINPARITY_TEST_PARENT_ONLY"] = "1"
    try:
        child = spec(
            tmp_path, "describe", "describe.py", cwd=workdir, env={**ENV, "CHILD_ONLY": "x"}
        )
        (result,) = run_children([child], timeout=30)
    finally:
        del os.environ["TRAINPARITY_TEST_PARENT_ONLY"]
    assert result.exit_code == 0
    described = json.loads((tmp_path / "describe.out").read_text())
    assert described["cwd"] == str(workdir)
    assert described["environ"]["CHILD_ONLY"] == "x"
    assert "TRAINPARITY_TEST_PARENT_ONLY" not in described["environ"]


def test_child_sees_only_stdio_descriptors_and_dev_null_stdin(tmp_path):
    leaked_read, leaked_write = os.pipe()
    os.set_inheritable(leaked_write, True)
    try:
        (result,) = run_children([spec(tmp_path, "describe", "describe.py")], timeout=30)
    finally:
        os.close(leaked_read)
        os.close(leaked_write)
    described = json.loads((tmp_path / "describe.out").read_text())
    assert sorted(
        fd for fd, target in described["descriptors"].items() if target != described["fd_dir"]
    ) == ["0", "1", "2"]
    assert described["stdin_is_dev_null"]


def test_children_run_at_the_same_time(tmp_path):
    specs = [spec(tmp_path, f"sleeper{i}", "timed_sleep.py", "0.5") for i in range(3)]
    results = run_children(specs, timeout=30)
    assert [result.name for result in results] == ["sleeper0", "sleeper1", "sleeper2"]
    intervals = [
        tuple(map(float, (tmp_path / f"sleeper{i}.out").read_text().split())) for i in range(3)
    ]
    latest_start = max(start for start, _ in intervals)
    earliest_end = min(end for _, end in intervals)
    assert latest_start < earliest_end  # all three were asleep at the same moment


def test_resource_usage_is_reported(tmp_path):
    (result,) = run_children([spec(tmp_path, "burner", "burn_cpu.py", "0.3", "64")], timeout=30)
    assert result.exit_code == 0
    assert result.user_seconds >= 0.2
    assert result.peak_rss_bytes >= 64 << 20
    assert result.wall_seconds >= result.user_seconds * 0.9


def test_events_report_starts_and_ends(tmp_path):
    events: list[tuple[str, str, ChildResult | None]] = []
    results = run_children(
        [spec(tmp_path, "a", "exit_with.py", "0"), spec(tmp_path, "b", "exit_with.py", "1")],
        timeout=30,
        on_event=lambda name, kind, result: events.append((name, kind, result)),
    )
    assert events[:2] == [("a", "start", None), ("b", "start", None)]
    ends = {name: result for name, kind, result in events[2:] if kind == "end"}
    assert len(events) == 4 and ends == {result.name: result for result in results}


def test_exception_from_callback_terminates_running_children(tmp_path, new_zombies):
    def fail_on_end(name, kind, result):
        if kind == "end":
            probe.read_pid_file(tmp_path / "pid", 10)  # the stubborn child is up
            raise RuntimeError("progress display broke")

    specs = [
        spec(tmp_path, "quick", "exit_with.py", "0"),
        spec(tmp_path, "stubborn", "hang.py", str(tmp_path / "pid"), "ignore-term"),
    ]
    with pytest.raises(RuntimeError, match="progress display broke"):
        run_children(specs, timeout=30, grace=0.3, on_event=fail_on_end)
    stubborn = probe.read_pid_file(tmp_path / "pid", 1)
    assert new_zombies() == []
    assert probe.wait_until(lambda: probe.live_group_members(stubborn) == [], 3)


@pytest.mark.parametrize(
    ("overrides", "step", "error_type"),
    [
        ({"argv": ["no-such-program-xyz"]}, "exec", FileNotFoundError),
        ({"cwd": "/nonexistent/dir"}, "chdir", FileNotFoundError),
        ({"stdout_path": "/nonexistent/out"}, "stdout", FileNotFoundError),
    ],
)
def test_launch_failure_raises_child_launch_error(tmp_path, overrides, step, error_type):
    with pytest.raises(ChildLaunchError) as raised:
        run_children([spec(tmp_path, "broken", "exit_with.py", "0", **overrides)], timeout=30)
    error = raised.value
    assert isinstance(error, OSError) and isinstance(error.__cause__, error_type)
    assert (error.child_name, error.step, error.errno) == ("broken", step, error.__cause__.errno)
    assert "child 'broken'" in str(error) and f"step '{step}'" in str(error)


def test_launch_failure_terminates_children_already_started(tmp_path, new_zombies):
    def wait_for_first_child(name, kind, result):
        # Its launch is reported before the next child is launched: hold the
        # run here until it is up and ignoring SIGTERM.
        if (name, kind) == ("started", "start"):
            probe.read_pid_file(tmp_path / "pid", 10)

    specs = [
        spec(tmp_path, "started", "hang.py", str(tmp_path / "pid"), "ignore-term"),
        spec(tmp_path, "broken", "exit_with.py", "0", cwd="/nonexistent/dir"),
    ]
    with pytest.raises(ChildLaunchError, match="child 'broken'"):
        run_children(specs, timeout=30, grace=0.3, on_event=wait_for_first_child)
    started = int((tmp_path / "pid").read_text())
    assert new_zombies() == []
    assert probe.wait_until(lambda: probe.live_group_members(started) == [], 3)


def test_ctrl_c_kills_every_child_group_and_reraises(tmp_path):
    driver = subprocess.Popen(
        [sys.executable, str(CHILDREN / "interrupt_driver.py"), str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    groups: set[int] = set()
    try:
        stubborn = probe.read_pid_file(tmp_path / "stubborn.pid", 20)
        grandchild = probe.read_pid_file(tmp_path / "grandchild.pid", 20)
        groups = {stubborn, os.getpgid(grandchild)}
        driver.send_signal(signal.SIGINT)
        stdout, stderr = driver.communicate(timeout=20)
    finally:
        driver.kill()
        driver.wait()
        if driver.returncode != 130:  # failed: leave no SIGTERM-ignoring process behind
            for group in groups:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
    assert driver.returncode == 130, stderr
    assert (tmp_path / "interrupted").read_text() == "KeyboardInterrupt"
    for group in groups:
        assert probe.wait_until(lambda group=group: probe.live_group_members(group) == [], 3)


@pytest.mark.parametrize(
    ("overrides", "error_type", "message"),
    [
        ({"argv": "python train.py"}, TypeError, "argv must be a sequence of str"),
        ({"argv": []}, ValueError, "argv must not be empty"),
        ({"argv": ["python", Path("train.py")]}, TypeError, "argv[1] must be str, not"),
        ({"argv": ["python", "a\0b"]}, ValueError, "argv[1] contains a NUL character"),
        ({"env": {"A=B": "1"}}, ValueError, "env key 'A=B' is not a valid variable name"),
        ({"env": {"A": 1}}, TypeError, "env entries must be str to str"),
        ({"env": ["A=1"]}, TypeError, "env must be a mapping"),
        ({"cwd": b"/tmp"}, TypeError, "cwd must be a str or os.PathLike path"),
    ],
)
def test_invalid_specs_are_rejected_on_construction(tmp_path, overrides, error_type, message):
    with pytest.raises(error_type) as raised:
        spec(tmp_path, "child", "exit_with.py", "0", **overrides)
    assert message in str(raised.value)


def test_empty_child_name_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="child name must be a non-empty str"):
        ChildSpec("", ["true"], tmp_path, ENV, tmp_path / "out", tmp_path / "err")


def test_spec_is_normalised_and_immutable(tmp_path):
    environment = {"A": "1"}
    child = spec(tmp_path, "child", "exit_with.py", "0", env=environment, cwd=str(tmp_path))
    environment["A"] = "changed"
    assert child.env == {"A": "1"} and isinstance(child.argv, tuple)
    assert child.cwd == tmp_path and isinstance(child.stdout_path, Path)
    with pytest.raises(TypeError):
        child.env["A"] = "2"


@pytest.mark.parametrize(
    ("keywords", "error_type", "message"),
    [
        ({"timeout": 0}, ValueError, "timeout must be a positive"),
        ({"timeout": float("inf")}, ValueError, "timeout must be a positive"),
        ({"timeout": "5"}, TypeError, "timeout must be a number"),
        ({"timeout": 5, "grace": -1}, ValueError, "grace must be"),
    ],
)
def test_invalid_run_arguments(tmp_path, keywords, error_type, message):
    with pytest.raises(error_type, match=message):
        run_children([spec(tmp_path, "child", "exit_with.py", "0")], **keywords)


def test_duplicate_names_are_rejected_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="'twin' is used twice"):
        run_children(
            [
                spec(tmp_path, "twin", "exit_with.py", "0"),
                spec(tmp_path, "twin", "exit_with.py", "1"),
            ],
            timeout=30,
        )
    assert not (tmp_path / "twin.out").exists()


def test_no_specs_is_no_work():
    started = time.monotonic()
    assert run_children([], timeout=1) == []
    assert time.monotonic() - started < 0.5
