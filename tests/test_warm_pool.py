"""shared_warm_servers(): warm servers kept between the checks of one process, and given back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trainparity
from trainparity import Outcome, check_resume
from trainparity._internal.processes.group import ChildGroup, ChildSpec
from trainparity._internal.processes.warm.pool import (
    SharedWarmServers,
    current_shared_servers,
    shared_warm_servers,
)
from trainparity._internal.processes.warm.starter import ChildStarter

QUICKSTART = "trainparity.quickstarts.resume:CleanCase"
# What differs between two checks of one case whatever their servers: clocks, pids, sizes.
VOLATILE = {"timing_seconds", "processes", "process_ids", "snapshot_ipc_bytes"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _launch(
    starter: ChildStarter,
    name: str,
    tmp_path: Path,
    code: str = "import os; print(os.getpid())",
    **variables: str,
) -> str:
    """One `python -c code` child through `starter`; its stdout."""
    environment = {**os.environ, "PYTHONHASHSEED": "0", **variables}
    spec = ChildSpec(
        name=name,
        argv=[sys.executable, "-c", code],
        cwd=tmp_path,
        env=environment,
        stdout_path=tmp_path / f"{name}.out",
        stderr_path=tmp_path / f"{name}.err",
    )
    with ChildGroup(launcher=starter.launch) as group:
        group.start(spec, timeout=120)
        assert group.wait_for(name).exit_code == 0
    return (tmp_path / f"{name}.out").read_text()


def _comparable(result) -> dict:
    report = result.to_dict()
    environment = dict(report.pop("environment"))
    environment.pop("child_start")
    return {
        **{k: v for k, v in report.items() if k not in VOLATILE},
        "environment_keys": sorted(environment),
    }


def test_the_next_warm_check_forks_from_the_server_the_last_one_gave_back(tmp_path):
    with shared_warm_servers() as shared:
        first = check_resume(QUICKSTART, start="warm", temporary_root=tmp_path)
        (server,) = shared.idle_pids
        second = check_resume(QUICKSTART, start="warm", temporary_root=tmp_path)
        assert shared.idle_pids == (server,) and _alive(server)  # the same server, kept again
    assert not _alive(server)  # leaving the block stops it
    for result in (first, second):
        assert result.outcome is Outcome.PASS, result.message
        assert result.environment["child_start"]["fresh"] == {}
        assert len(result.environment["child_start"]["warm"]) == 5
    assert _comparable(first) == _comparable(second)
    assert list(tmp_path.iterdir()) == []  # each check's run directory is gone


UNCLOSED = """\
import os, sys
from pathlib import Path
from trainparity._internal.processes.group import ChildGroup, ChildSpec
from trainparity._internal.processes.warm.starter import ChildStarter
from trainparity._internal.processes.warm.pool import shared_warm_servers
out = Path(sys.argv[1])
shared = shared_warm_servers().__enter__()  # as a notebook would, never left
starter = ChildStarter("warm", log_dir=out, timeout=120, shared=shared)
spec = ChildSpec(name="one", argv=[sys.executable, "-c", "pass"], cwd=out,
                 env={**os.environ, "PYTHONHASHSEED": "0"},
                 stdout_path=out / "one.out", stderr_path=out / "one.err")
with ChildGroup(launcher=starter.launch) as group:
    group.start(spec, timeout=120)
    assert group.wait_for("one").exit_code == 0
starter.close()
(server,) = shared.idle_pids
print(server, shared._directory, flush=True)
"""


def test_a_process_that_ends_inside_the_block_leaves_no_server_and_no_directory(tmp_path):
    (tmp_path / "driver.py").write_text(UNCLOSED)
    completed = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    server, directory = completed.stdout.split()
    assert Path(directory).name.startswith("trainparity-warm-servers-")
    assert not Path(directory).exists()
    deadline = time.monotonic() + 30
    while _alive(int(server)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(int(server))


def test_a_server_seeded_for_one_phase_is_never_kept(tmp_path):
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    with shared_warm_servers() as shared:
        starter = ChildStarter("warm", log_dir=tmp_path, timeout=120, shared=shared)
        spec = ChildSpec(
            name="unseeded",
            argv=[sys.executable, "-c", "pass"],
            cwd=tmp_path,
            env=environment,
            stdout_path=tmp_path / "u.out",
            stderr_path=tmp_path / "u.err",
        )
        with ChildGroup(launcher=starter.launch) as group:
            group.start(spec, timeout=120)
            assert group.wait_for("unseeded").exit_code == 0
        (server,) = starter._servers.values()
        pid = server.pid
        starter.close()
        assert shared.idle_pids == () and not _alive(pid)
        assert starter.report["warm"] == ["unseeded"]


def test_a_check_whose_shared_servers_closed_meanwhile_starts_and_stops_its_own(tmp_path):
    shared = shared_warm_servers().__enter__()
    starter = ChildStarter("warm", log_dir=tmp_path / "own", timeout=120, shared=shared)
    shared.close()  # another thread left the block while this check ran
    _launch(starter, "late", tmp_path)
    assert starter.report == {"mode": "warm", "warm": ["late"], "fresh": {}}
    (server,) = starter._servers.values()
    assert server.stderr_path.parent == tmp_path / "own"
    pid = server.pid
    starter.close()
    assert not _alive(pid) and shared.idle_pids == ()
    with pytest.raises(RuntimeError, match="closed: open new ones"):
        shared.__enter__()


# Two scenarios, each one block of shared servers whose steps several tests below judge:
# each server imports torch (1 to 4 s of CPU), and one block shows what three did.


@pytest.fixture(scope="module")
def borrowed(tmp_path_factory) -> dict:
    """Two checks at once, then a third after their servers died idle, then the block left."""
    tmp_path = tmp_path_factory.mktemp("borrowed")
    own = tmp_path / "own"
    seen: dict = {}
    with shared_warm_servers() as shared:
        one = ChildStarter("warm", log_dir=own, timeout=120, shared=shared)
        other = ChildStarter("warm", log_dir=own, timeout=120, shared=shared)
        _launch(one, "a", tmp_path)
        _launch(other, "b", tmp_path)  # one still holds its server: other starts its own
        seen["held"] = [[server.pid for server in s._servers.values()] for s in (one, other)]
        (server,) = one._servers.values()
        seen["directory"] = directory = server.stderr_path.parent
        one.close()
        other.close()
        seen["idle"] = shared.idle_pids
        seen["directory_while_open"] = directory.is_dir()
        for dead in seen["idle"]:
            os.kill(dead, signal.SIGKILL)
            while _alive(dead):
                threading.Event().wait(0.01)
        third = ChildStarter("warm", log_dir=own, timeout=120, shared=shared)
        _launch(third, "c", tmp_path)
        seen["third_report"] = third.report
        seen["third"] = [server.pid for server in third._servers.values()]
        third.close()
        seen["idle_after_third"] = shared.idle_pids
        seen["own_log_dir"] = own.exists()
    seen["alive_after_block"] = [_alive(pid) for pid in seen["third"]]
    seen["directory_after_block"] = seen["directory"].exists()
    seen["current_is_ours"] = current_shared_servers() is shared
    return seen


def test_a_borrowed_server_serves_one_check_at_a_time(borrowed):
    one, other = borrowed["held"]
    assert len(one) == len(other) == 1 and one != other
    assert set(borrowed["idle"]) == {*one, *other}  # both given back


def test_an_idle_server_that_died_is_replaced_and_the_child_still_forked_warm(borrowed):
    # Both idle servers were killed: the next check skips them and starts a new one.
    assert borrowed["third_report"] == {"mode": "warm", "warm": ["c"], "fresh": {}}
    (server,) = borrowed["third"]
    assert server not in borrowed["idle"]
    assert borrowed["idle_after_third"] == (server,)


def test_leaving_the_block_stops_the_servers_and_removes_their_directory(borrowed):
    assert borrowed["directory_while_open"]
    assert not borrowed["own_log_dir"]  # the shared servers log in their own directory
    assert borrowed["alive_after_block"] == [False]
    assert not borrowed["directory_after_block"]
    assert not borrowed["current_is_ours"]


TESTS = ("tests/a.py::one (call)", "tests/b.py::two (call)")


@pytest.fixture(scope="module")
def threaded(tmp_path_factory) -> dict:
    """A check in a thread that ended gives back its server; a check of another test next."""
    tmp_path = tmp_path_factory.mktemp("threaded")
    code = "import os; print(os.environ['PYTEST_CURRENT_TEST'])"
    seen: dict = {}
    with shared_warm_servers() as shared:

        def check_in_a_thread() -> int:
            starter = ChildStarter("warm", log_dir=tmp_path, timeout=120, shared=shared)
            seen["first_output"] = _launch(
                starter, "threaded", tmp_path, code, PYTEST_CURRENT_TEST=TESTS[0]
            )
            (server,) = starter._servers.values()
            starter.close()
            return server.pid

        with ThreadPoolExecutor(1) as pool:
            seen["first"] = pid = pool.submit(check_in_a_thread).result()
        # The thread has ended.
        time.sleep(0.5)  # a parent-death signal would have arrived by now
        seen["alive_after_thread"] = _alive(pid)
        seen["idle_after_thread"] = shared.idle_pids
        starter = ChildStarter("warm", log_dir=tmp_path, timeout=120, shared=shared)
        seen["next_output"] = _launch(starter, "next", tmp_path, code, PYTEST_CURRENT_TEST=TESTS[1])
        seen["next"] = [server.pid for server in starter._servers.values()]
        starter.close()
        seen["idle_after_next"] = shared.idle_pids
    return seen


def test_checks_of_two_tests_share_a_server_and_each_child_sees_its_own_test(threaded):
    # pytest names the running test in PYTEST_CURRENT_TEST, which a check passes on to its
    # children: a server keyed on it would serve one test only.
    assert [threaded["first_output"], threaded["next_output"]] == [f"{test}\n" for test in TESTS]
    assert threaded["next"] == [threaded["first"]]
    assert threaded["idle_after_next"] == (threaded["first"],)


def test_a_server_given_back_by_a_thread_that_ended_still_serves_the_next_check(threaded):
    # A server's parent-death signal fires when the thread that started it ends: a check run
    # in a ThreadPoolExecutor's thread must not leave behind a server that dies with it.
    assert threaded["alive_after_thread"]
    assert threaded["idle_after_thread"] == (threaded["first"],)
    assert threaded["next"] == [threaded["first"]]  # forked the next check's child


def test_fresh_checks_and_starters_without_shared_servers_keep_nothing(tmp_path):
    with shared_warm_servers() as shared:
        fresh = ChildStarter("fresh", log_dir=tmp_path, timeout=120, shared=shared)
        _launch(fresh, "fresh", tmp_path)
        fresh.close()
        alone = ChildStarter("warm", log_dir=tmp_path / "servers", timeout=120)
        _launch(alone, "alone", tmp_path)
        (server,) = alone._servers.values()
        pid = server.pid
        alone.close()
        assert shared.idle_pids == () and not _alive(pid)


class _Server:
    """A stand-in for a warm server: the pool knows servers only by pid, alive() and close()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.closed = False

    def alive(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


def test_past_max_idle_the_server_idle_longest_stops_first():
    shared = SharedWarmServers(max_idle=2)
    busy, other, new = _Server(1), _Server(2), _Server(3)
    for _ in range(3):  # however many checks it served before
        shared.give_back("busy", busy)
        assert shared.take("busy") is busy
    shared.give_back("busy", busy)
    shared.give_back("other", other)
    shared.give_back("new", new)  # three idle, two kept: the last two given back
    assert shared.idle_pids == (2, 3) and busy.closed and not new.closed
    assert shared.take("busy") is None
    assert shared.take("other") is other  # taken and given back: now the most recent
    shared.give_back("other", other)
    shared.give_back("newer", newer := _Server(4))
    assert shared.idle_pids == (2, 4) and new.closed
    shared.close()
    assert other.closed and newer.closed and shared.idle_pids == ()
    shared.give_back("late", late := _Server(5))  # a check that ends after the block stops it
    assert late.closed and shared.idle_pids == ()


def test_blocks_nest_and_max_idle_is_checked():
    outer_before = current_shared_servers()
    with shared_warm_servers(max_idle=1) as outer:
        with shared_warm_servers() as inner:
            assert current_shared_servers() is inner
        assert current_shared_servers() is outer
    assert current_shared_servers() is outer_before
    for bad in (0, -1, True, 1.5, "2"):
        with pytest.raises(ValueError, match="max_idle must be a whole number of servers >= 1"):
            SharedWarmServers(bad)


def test_the_public_name_and_the_pytest_fixture(trainparity_shared_warm_servers):
    assert trainparity.shared_warm_servers is shared_warm_servers
    # tests/conftest.py opens the plugin's session fixture for every worker.
    assert isinstance(trainparity_shared_warm_servers, SharedWarmServers)
