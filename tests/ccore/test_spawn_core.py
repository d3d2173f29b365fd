"""Native core spawn/wait/kill_group: launch, isolation, failure reports, waiting, group kills."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILDREN = Path(__file__).resolve().parent.parent / "fixtures" / "spawn_children"
_probe_spec = importlib.util.spec_from_file_location("spawn_probe", CHILDREN / "probe.py")
probe = importlib.util.module_from_spec(_probe_spec)
_probe_spec.loader.exec_module(probe)

PATH_ENV = f"PATH={os.environ.get('PATH', '/usr/bin:/bin')}"


def python_child(script: str, *args: str) -> list[str]:
    return [sys.executable, str(CHILDREN / script), *args]


@pytest.fixture
def launch(core, tmp_path):
    """spawn with defaults (cwd tmp_path, PATH only, output in tmp_path); kills leftovers after."""
    started: list[int] = []

    def launch(argv, **overrides):
        arguments = dict(
            cwd=str(tmp_path),
            env=[PATH_ENV],
            stdout_path=str(tmp_path / "out"),
            stderr_path=str(tmp_path / "err"),
        )
        arguments.update(overrides)
        pid = core.spawn(argv, **arguments)
        started.append(pid)
        return pid

    yield launch
    for pid in started:
        core.kill_group(pid, signal.SIGKILL)
        try:
            core.wait([pid], 5)
        except ChildProcessError:
            pass  # reaped by the test


def wait_one(core, pid, timeout=10.0):
    records = core.wait([pid], timeout)
    assert [record.pid for record in records] == [pid]
    return records[0]


def test_child_output_goes_to_files_and_exit_code_is_reported(core, launch, tmp_path):
    pid = launch(python_child("exit_with.py", "3"))
    assert os.getpgid(pid) == pid  # own process group from the moment spawn returns
    record = wait_one(core, pid)
    assert (record.exit_code, record.signal) == (3, None)
    assert (tmp_path / "out").read_text() == "to stdout\n"
    assert (tmp_path / "err").read_text() == "to stderr\n"


def test_output_files_are_truncated_not_appended(core, launch, tmp_path):
    (tmp_path / "out").write_text("old content that is longer than the new\n" * 10)
    wait_one(core, launch(python_child("exit_with.py", "0")))
    assert (tmp_path / "out").read_text() == "to stdout\n"


def test_env_and_cwd_are_exactly_those_given(core, launch, tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    pid = launch(python_child("describe.py"), cwd=str(workdir), env=[PATH_ENV, "ONLY_ME=1"])
    assert wait_one(core, pid).exit_code == 0
    described = json.loads((tmp_path / "out").read_text())
    assert described["cwd"] == str(workdir)
    assert described["environ"]["ONLY_ME"] == "1"
    assert "HOME" not in described["environ"]  # nothing inherited from the test process
    assert described["pgid"] == described["pid"] == pid


def test_only_stdio_descriptors_reach_the_child_and_stdin_is_dev_null(core, launch, tmp_path):
    leaked_read, leaked_write = os.pipe()
    os.set_inheritable(leaked_read, True)  # would survive exec without the close-all step
    try:
        pid = launch(python_child("describe.py"))
        assert wait_one(core, pid).exit_code == 0
    finally:
        os.close(leaked_read)
        os.close(leaked_write)
    described = json.loads((tmp_path / "out").read_text())
    others = {
        fd: target
        for fd, target in described["descriptors"].items()
        if fd not in ("0", "1", "2") and target != described["fd_dir"]
    }
    assert others == {}
    assert described["descriptors"]["1"] == str(tmp_path / "out")
    assert described["descriptors"]["2"] == str(tmp_path / "err")
    assert described["stdin_is_dev_null"]


def test_signal_dispositions_and_mask_are_reset(core, launch, tmp_path):
    # Python ignores SIGPIPE; block SIGUSR1 and ignore SIGUSR2 as well: the
    # child must inherit none of it (ignored signals survive exec otherwise).
    previous_handler = signal.signal(signal.SIGUSR2, signal.SIG_IGN)
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    try:
        pid = launch(["cat", "/proc/self/status"])
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        signal.signal(signal.SIGUSR2, previous_handler)
    assert wait_one(core, pid).exit_code == 0
    status = dict(line.split(":\t", 1) for line in (tmp_path / "out").read_text().splitlines())
    assert int(status["SigBlk"], 16) == 0
    assert int(status["SigIgn"], 16) == 0


def test_bare_program_is_searched_in_the_child_env_path(core, launch, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "my-tool"
    tool.write_text("#!/bin/sh\necho found-me\n")
    tool.chmod(0o755)
    pid = launch(["my-tool"], env=[f"PATH={tmp_path / 'missing'}:{bin_dir}:/usr/bin:/bin"])
    assert wait_one(core, pid).exit_code == 0
    assert (tmp_path / "out").read_text() == "found-me\n"


def test_without_path_in_env_the_default_search_path_is_used(core, launch):
    assert wait_one(core, launch(["true"], env=[])).exit_code == 0


@pytest.mark.parametrize(
    ("overrides", "argv", "error_type", "step", "filename"),
    [
        ({"cwd": "/nonexistent/dir"}, ["true"], FileNotFoundError, "chdir", "/nonexistent/dir"),
        ({}, ["no-such-program-xyz"], FileNotFoundError, "exec", "no-such-program-xyz"),
        ({}, ["./plain-file"], PermissionError, "exec", "./plain-file"),
        (
            {"stdout_path": "/nonexistent/out"},
            ["true"],
            FileNotFoundError,
            "stdout",
            "/nonexistent/out",
        ),
        (
            {"stderr_path": "/nonexistent/err"},
            ["true"],
            FileNotFoundError,
            "stderr",
            "/nonexistent/err",
        ),
    ],
)
def test_failed_step_is_raised_naming_step_and_program(
    core, launch, tmp_path, overrides, argv, error_type, step, filename
):
    (tmp_path / "plain-file").write_text("not a program\n")  # mode 0644: not executable
    with pytest.raises(error_type) as raised:
        launch(argv, **overrides)
    error = raised.value
    assert error.step == step
    assert error.filename == filename
    assert f"'{argv[0]}'" in str(error) and f"step '{step}'" in str(error)
    assert error.strerror.endswith(os.strerror(error.errno))
    assert probe.zombie_children() == []  # the failed child was reaped


def test_output_files_exist_when_exec_fails(core, launch, tmp_path):
    with pytest.raises(FileNotFoundError):
        launch(["no-such-program-xyz"])
    assert (tmp_path / "out").exists() and (tmp_path / "err").exists()


@pytest.mark.parametrize(
    ("argv", "overrides", "error_type", "message"),
    [
        ("true", {}, TypeError, "argv must be a list or tuple of str"),
        ([], {}, ValueError, "argv must not be empty"),
        ([""], {}, ValueError, "argv[0], the program, must not be empty"),
        (["true", 3], {}, TypeError, "argv[1] must be str, not int"),
        (["tr\0ue"], {}, ValueError, "argv[0] contains a NUL character"),
        (["true"], {"env": ["NOEQUALS"]}, ValueError, "env[0] must look like 'KEY=VALUE'"),
        (["true"], {"env": ["=value"]}, ValueError, "env[0] must look like 'KEY=VALUE'"),
        (["true"], {"env": {"A": "1"}}, TypeError, "env must be a list or tuple of str"),
        (["true"], {"cwd": 5}, TypeError, "cwd must be a str or os.PathLike path, not int"),
        (["true"], {"cwd": ""}, ValueError, "cwd must not be empty"),
        (["true"], {"stdout_path": "a\0b"}, ValueError, "stdout_path contains a NUL character"),
    ],
)
def test_invalid_arguments_are_rejected_before_fork(
    core, launch, argv, overrides, error_type, message
):
    with pytest.raises(error_type) as raised:
        launch(argv, **overrides)
    assert message in str(raised.value)


def test_missing_keyword_argument_is_named(core, tmp_path):
    with pytest.raises(TypeError, match="missing required keyword argument 'env'"):
        core.spawn(["true"], cwd=str(tmp_path), stdout_path="out", stderr_path="err")


def test_wait_times_out_with_empty_list_and_child_keeps_running(core, launch):
    pid = launch(python_child("hang.py"))
    started = time.monotonic()
    assert core.wait([pid], 0.3) == []
    assert time.monotonic() - started >= 0.29
    assert core.wait([pid], 0) == []
    assert probe.is_alive(pid)
    assert core.kill_group(pid, signal.SIGKILL) is True
    record = wait_one(core, pid)
    assert (record.exit_code, record.signal) == (None, signal.SIGKILL)


def test_wait_returns_when_the_first_child_exits(core, launch):
    quick = launch(["sleep", "0.2"])
    slow = launch(python_child("hang.py"))
    started = time.monotonic()
    records = core.wait([slow, quick], 10)
    assert [record.pid for record in records] == [quick]
    assert time.monotonic() - started < 5
    assert probe.is_alive(slow)


def test_wait_reaps_every_child_that_has_exited(core, launch):
    first, second = launch(["true"]), launch(["false"])
    assert probe.wait_until(lambda: not probe.is_alive(first) and not probe.is_alive(second), 5)
    records = core.wait((first, second), 5)
    assert sorted((record.pid, record.exit_code) for record in records) == sorted(
        [(first, 0), (second, 1)]
    )


def test_segfault_is_reported_as_signal(core, launch):
    record = wait_one(core, launch(python_child("segfault.py")))
    assert (record.exit_code, record.signal) == (None, signal.SIGSEGV)


def test_resource_usage_is_plausible(core, launch):
    record = wait_one(core, launch(python_child("burn_cpu.py", "0.3", "64")))
    assert record.exit_code == 0
    assert record.user_seconds >= 0.2
    assert record.sys_seconds >= 0.0
    assert record.peak_rss_bytes >= 64 << 20


def test_kill_group_on_exit_kills_what_the_child_left_behind(core, launch, tmp_path):
    pid = launch(python_child("grandchild.py", str(tmp_path / "gc.pid"), "exit"))
    record = wait_one(core, pid)  # without kill_group_on_exit
    assert record.exit_code == 0
    grandchild = probe.read_pid_file(tmp_path / "gc.pid", 5)
    assert probe.is_alive(grandchild)  # orphaned, still in the child's group
    assert core.kill_group(pid, signal.SIGTERM) is True
    time.sleep(0.2)
    assert probe.is_alive(grandchild)  # it ignores SIGTERM
    core.kill_group(pid, signal.SIGKILL)
    assert probe.wait_until(lambda: probe.live_group_members(pid) == [], 5)

    pid = launch(python_child("grandchild.py", str(tmp_path / "gc2.pid"), "exit"))
    assert probe.read_pid_file(tmp_path / "gc2.pid", 5)
    records = core.wait([pid], 10, kill_group_on_exit=True)
    assert [record.exit_code for record in records] == [0]
    assert probe.wait_until(lambda: probe.live_group_members(pid) == [], 5)


def test_kill_group_reports_a_missing_group_and_refuses_dangerous_ids(core, launch):
    pid = launch(["true"])
    wait_one(core, pid)
    assert core.kill_group(pid, signal.SIGTERM) is False
    for pgid in (0, 1, -5, os.getpgrp()):
        with pytest.raises(ValueError, match="pgid"):
            core.kill_group(pgid, signal.SIGTERM)
    with pytest.raises(ValueError, match="sig must be in"):
        core.kill_group(pid, 1000)


def test_wait_argument_errors(core, launch):
    with pytest.raises(ChildProcessError, match="not an unreaped child"):
        core.wait([1], 0)
    with pytest.raises(ValueError, match="pids must not be empty"):
        core.wait([], 1)
    with pytest.raises(TypeError, match="pids must be a list or tuple of int"):
        core.wait(5, 1)
    with pytest.raises(TypeError, match=r"pids\[0\] must be int"):
        core.wait(["5"], 1)
    with pytest.raises(ValueError, match="is not a process id"):
        core.wait([0], 1)
    pid = launch(python_child("hang.py"))
    with pytest.raises(ValueError, match="listed twice"):
        core.wait([pid, pid], 1)
    for bad_timeout in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout must be"):
            core.wait([pid], bad_timeout)


def test_spawn_works_when_the_parent_has_no_stdio(tmp_path):
    # With 0-2 closed in the parent, the failure pipe and the opened files
    # land on 0-2; spawn must still wire the child correctly.
    driver = subprocess.run(
        [sys.executable, str(CHILDREN / "core_driver.py"), "closed-stdio", str(tmp_path)],
        timeout=30,
        capture_output=True,
    )
    assert driver.returncode == 0, driver.stderr
    record = json.loads((tmp_path / "record.json").read_text())
    assert (record["exit_code"], record["signal"]) == (0, None)
    described = json.loads((tmp_path / "out.json").read_text())
    assert described["descriptors"]["1"] == str(tmp_path / "out.json")
    assert described["descriptors"]["2"] == str(tmp_path / "err.txt")
    assert described["stdin_is_dev_null"]


@pytest.mark.parametrize("interrupting", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_with_a_raising_handler_interrupts_wait_promptly(tmp_path, interrupting):
    # Ctrl-C, and SIGTERM/SIGHUP while a check has its handlers installed.
    driver = subprocess.Popen(
        [sys.executable, str(CHILDREN / "core_driver.py"), "interrupt", str(tmp_path), interrupting]
    )
    try:
        child = probe.read_pid_file(tmp_path / "child.pid", 10)
        time.sleep(0.3)  # the driver is inside wait() by now
        sent_at = time.monotonic()
        driver.send_signal(signal.Signals[interrupting])
        assert driver.wait(timeout=10) == 130
        interrupted_at = float((tmp_path / "interrupted").read_text())
        assert interrupted_at - sent_at < 1.0  # wakes every 100 ms to check signals
        assert not probe.is_alive(child)
    finally:
        driver.kill()
        driver.wait()


def test_child_dies_with_its_parent(tmp_path):
    driver = subprocess.Popen(
        [sys.executable, str(CHILDREN / "core_driver.py"), "pdeathsig", str(tmp_path)]
    )
    try:
        child = probe.read_pid_file(tmp_path / "child.pid", 10)
        assert probe.is_alive(child)
    finally:
        driver.kill()
        driver.wait()
    assert probe.wait_until(lambda: not probe.is_alive(child), 5)


def test_no_descriptor_or_child_is_left_behind_by_any_path(core, launch, tmp_path):
    def descriptors():
        return sorted(os.listdir("/proc/self/fd"))

    before = descriptors()
    for _ in range(20):
        wait_one(core, launch(["true"]))
        with pytest.raises(FileNotFoundError):
            launch(["true"], cwd=str(tmp_path / "missing"))
        with pytest.raises(TypeError):
            launch(["true", 1])
        hanging = launch(["sleep", "5"])
        assert core.wait([hanging], 0.01) == []
        core.kill_group(hanging, signal.SIGKILL)
        wait_one(core, hanging)
    assert descriptors() == before
    assert probe.zombie_children() == []
