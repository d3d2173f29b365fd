"""Per-rank process evidence: /proc parsing, the watcher on a hand-made process tree, real torchrun."""

from __future__ import annotations

import io
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from trainparity._internal.distributed import rank_watcher
from trainparity._internal.distributed.phases import (
    PHASE_TAG_VARIABLE,
    environ_items,
    phase_environment,
    rank_failure,
    reported_rank_exits,
    sweep,
    tagged_processes,
)
from trainparity._internal.distributed.rank_processes import (
    RankProcessEvidence,
    rank_event_detail,
    rank_evidence,
    read_rank_exits,
    unsampled_exit_events,
)
from trainparity._internal.distributed.rank_watcher import RankSample, RankWatcher

TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]

# Two ranks under a stand-in agent, as torchrun lays them out: rank 1 has a worker,
# which inherits RANK and must not count as a rank.
FAKE_AGENT = textwrap.dedent(
    """
    import os, subprocess, sys
    rank_code = (
        "import os, subprocess, sys, time\\n"
        "worker = None\\n"
        "if os.environ['RANK'] == '1':\\n"
        "    worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(0.6)'])\\n"
        "end = time.process_time() + 0.2\\n"
        "while time.process_time() < end: pass\\n"
        "time.sleep(0.4)\\n"
        "if worker: worker.wait()\\n"
    )
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", rank_code],
            env={**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2"},
        )
        for rank in range(2)
    ]
    sys.exit(max(rank.wait() for rank in ranks))
    """
)

RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    rank = int(os.environ["RANK"])
    ballast = bytearray((20 + 100 * rank) << 20)  # zero-filled, so resident
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    code = int(sys.argv[1])
    if rank == 0 and code:
        time.sleep(60)  # still running when rank 1 fails, however loaded the machine: torchrun stops it
    sys.exit(code if rank == 1 else 0)
    """
)

FAILURE_REPORT = """
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2025-01-01_00:00:00
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 302) Signal 9 (SIGKILL) received by PID 302
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 302
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2025-01-01_00:00:00
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 301)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""


def _sample(rank: int, pid: int, first_seen: float = 0.0) -> RankSample:
    return RankSample("baseline_a", rank, rank, pid, 0.5, 0.1, 64 << 20, first_seen, 1.0, True)


# Reading /proc ---------------------------------------------------------------------


def test_stat_of_this_process_matches_its_own_accounting():
    end = time.process_time() + 0.2
    while time.process_time() < end:
        pass
    stat = rank_watcher._read_stat(os.getpid())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert stat is not None and stat.state in "RS" and stat.parent_pid == os.getppid()
    assert stat.user_seconds == pytest.approx(usage.ru_utime + children.ru_utime, abs=0.05)
    assert stat.system_seconds == pytest.approx(usage.ru_stime + children.ru_stime, abs=0.05)
    assert rank_watcher._read_stat(os.getpid()).start_ticks == stat.start_ticks
    peak = rank_watcher._read_peak_rss(os.getpid())
    assert peak == pytest.approx(usage.ru_maxrss * 1024, rel=0.05)


def test_stat_of_a_child_whose_name_holds_parentheses_and_spaces():
    name_it = "open('/proc/self/comm', 'w').write('a) b (c'); import time; time.sleep(5)"
    child = subprocess.Popen([sys.executable, "-c", name_it])
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{child.pid}/comm").read_text().strip() != "a) b (c":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stat = rank_watcher._read_stat(child.pid)
        assert stat is not None and stat.parent_pid == os.getpid()
    finally:
        child.kill()
        child.wait()
    assert rank_watcher._read_stat(child.pid) is None  # reaped: gone
    assert rank_watcher._read_peak_rss(child.pid) is None


def test_identity_comes_from_the_environment():
    environment = {**os.environ, PHASE_TAG_VARIABLE: "feed", "RANK": "3", "LOCAL_RANK": "1"}
    tagged = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"], env=environment)
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        time.sleep(0.1)  # past exec
        assert rank_watcher._read_identity(tagged.pid) == ("feed", 3, 1)
        assert rank_watcher._read_identity(plain.pid) == (None, None, None)
    finally:
        for child in (tagged, plain):
            child.kill()
            child.wait()
    assert rank_watcher._read_identity(tagged.pid) == (None, None, None)


def test_a_warm_childs_padded_environment_block_reads_as_its_variables():
    # A warm child's /proc/PID/environ is its server's block, NUL-padded past its variables.
    block = b"A=1\0TRAINPARITY_PHASE_TAG=feed\0RANK=3\0" + b"\0" * 16384
    assert environ_items(block) == [b"A=1", b"TRAINPARITY_PHASE_TAG=feed", b"RANK=3"]
    assert environ_items(b"") == [b""]


# The watcher -------------------------------------------------------------------------


def test_a_phase_that_is_not_torchrun_costs_nothing():
    watcher = RankWatcher()
    assert watcher.watch("baseline_a", "feed", [sys.executable, "train.py"]) is False
    assert watcher._thread is None  # no thread, no scan
    assert watcher.close("baseline_a") == ()
    watcher.stop()


def test_watcher_finds_the_ranks_of_a_tagged_tree_and_not_their_workers(tmp_path):
    events = []
    env, tag = phase_environment(TORCHRUN, dict(os.environ), tmp_path)
    with RankWatcher(events.append) as watcher:
        # The gate asks for a torchrun argv; a stand-in agent makes the same tree without
        # torchrun's seconds of start-up.
        assert watcher.watch("baseline_a", tag, TORCHRUN)
        try:
            agent = subprocess.run(
                [sys.executable, "-c", FAKE_AGENT], env=env, timeout=30, check=True
            )
            samples = watcher.close("baseline_a")
        finally:
            sweep(tag)
    assert agent.returncode == 0
    assert [(sample.rank, sample.local_rank, sample.ended) for sample in samples] == [
        (0, 0, True),
        (1, 1, True),
    ]
    assert len({sample.pid for sample in samples}) == 2
    assert all(sample.user_seconds + sample.system_seconds > 0.1 for sample in samples)
    assert all(sample.last_seen > sample.first_seen for sample in samples)
    assert sorted((event.kind, event.sample.rank) for event in events) == [
        ("end", 0),
        ("end", 1),
        ("start", 0),
        ("start", 1),
    ]
    started = [event for event in events if event.kind == "start"]
    assert rank_event_detail(started[0]) == f"pid {started[0].sample.pid}"
    ended = next(event for event in events if event.kind == "end")
    assert "CPU s" in rank_event_detail(ended) and rank_event_detail(ended).endswith("sampled")
    assert tagged_processes(tag) == []


def test_a_rank_whose_environment_first_reads_empty_is_still_found(tmp_path, monkeypatch):
    # A process caught between the two halves of its exec reads as an empty environment
    # (/proc/PID/environ of its new image is not set up yet). Under load a sample can land
    # there; taking such a rank as untagged lost it for the whole phase.
    real_open = open
    emptied = set()

    def open_mid_exec(path, *args, **kwargs):
        if str(path).endswith("/environ") and path not in emptied:
            emptied.add(path)
            return io.BytesIO(b"")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(rank_watcher, "open", open_mid_exec, raising=False)
    env, tag = phase_environment(TORCHRUN, dict(os.environ), tmp_path)
    with RankWatcher() as watcher:
        assert watcher.watch("baseline_a", tag, TORCHRUN)
        try:
            subprocess.run([sys.executable, "-c", FAKE_AGENT], env=env, timeout=30, check=True)
            samples = watcher.close("baseline_a")
        finally:
            sweep(tag)
    assert [sample.rank for sample in samples] == [0, 1]
    assert all(sample.ended for sample in samples)


def test_a_raising_callback_is_called_once_and_raised_by_stop(tmp_path):
    calls = []

    def broken(event):
        calls.append(event)
        raise KeyError("progress printer")

    env, tag = phase_environment(TORCHRUN, dict(os.environ), tmp_path)
    watcher = RankWatcher(broken)
    watcher.watch("baseline_a", tag, TORCHRUN)
    try:
        subprocess.run([sys.executable, "-c", FAKE_AGENT], env=env, timeout=30, check=True)
        assert len(watcher.close("baseline_a")) == 2  # sampling went on
    finally:
        sweep(tag)
    with pytest.raises(KeyError, match="progress printer"):
        watcher.stop()
    assert len(calls) == 1
    assert not watcher._thread.is_alive()


# Evidence rows -----------------------------------------------------------------------


def test_torchrun_failure_report_as_data(tmp_path):
    root, other = reported_rank_exits("noise\n" + FAILURE_REPORT)
    assert (root.rank, root.local_rank, root.exitcode, root.pid) == (1, 1, 3, 301)
    assert (other.rank, other.exitcode, other.pid) == (2, -9, 302)
    assert reported_rank_exits("Traceback: something else") == ()
    stderr = tmp_path / "stderr.log"
    stderr.write_text(FAILURE_REPORT)
    assert rank_failure(stderr, tmp_path) == "rank 1 exited with code 3"


def test_rows_after_success_restarts_failure_and_timeout(tmp_path):
    stderr = tmp_path / "stderr.log"
    stderr.write_text(FAILURE_REPORT)
    samples = [_sample(1, 301), _sample(0, 300)]
    succeeded = rank_evidence(samples, phase_returncode=0, stderr_path=stderr)
    assert [(row.rank, row.pid, row.returncode) for row in succeeded] == [(0, 300, 0), (1, 301, 0)]
    # After a restart only each rank's last process is known to have exited 0.
    restarted = rank_evidence(
        [*samples, _sample(1, 401, first_seen=2.0)], phase_returncode=0, stderr_path=stderr
    )
    assert [(row.pid, row.returncode) for row in restarted] == [(300, 0), (301, None), (401, 0)]
    failed = rank_evidence(samples, phase_returncode=1, stderr_path=stderr)
    # rank 2 died before any sample: torchrun's report alone names it
    assert [(row.rank, row.pid, row.returncode, row.user_seconds) for row in failed] == [
        (0, 300, None, 0.5),
        (1, 301, 3, 0.5),
        (2, 302, -9, None),
    ]
    timed_out = rank_evidence(samples, phase_returncode=None, stderr_path=stderr)
    assert [row.returncode for row in timed_out] == [None, None]
    assert failed[1].to_dict() == {
        "rank": 1,
        "local_rank": 1,
        "pid": 301,
        "returncode": 3,
        "user_seconds": 0.5,
        "system_seconds": 0.1,
        "peak_rss_bytes": 64 << 20,
        "sample_interval_seconds": rank_watcher.SAMPLE_INTERVAL_SECONDS,
    }
    assert json.dumps([row.to_dict() for row in failed]) == json.dumps(
        [
            row.to_dict()
            for row in rank_evidence(samples[::-1], phase_returncode=1, stderr_path=stderr)
        ]
    )


def test_measured_exits_replace_samples_and_add_the_ranks_no_sample_saw(tmp_path):
    stderr = tmp_path / "stderr.log"
    stderr.write_text(FAILURE_REPORT)
    exits = tmp_path / "rank_exits.jsonl"
    measured = {"local_rank": 1, "user_seconds": 2.5, "system_seconds": 0.25,
                "peak_rss_bytes": 300 << 20}  # fmt: skip
    exits.write_text(
        json.dumps({**measured, "rank": 1, "pid": 301, "returncode": 3, "started": 5.0, "ended": 7.5}) + "\n"
        + json.dumps({**measured, "rank": 2, "pid": 302, "returncode": -9, "started": 6.0, "ended": 6.5}) + "\n"
        + '{"rank": 3, "pid": 303, "returnco'  # cut short by a killed agent: skipped
    )  # fmt: skip
    samples = [_sample(1, 301), _sample(0, 300)]
    measured_exits = read_rank_exits(exits)
    rows = rank_evidence(samples, phase_returncode=1, stderr_path=stderr, measured=measured_exits)
    assert [(row.rank, row.pid, row.returncode, row.user_seconds) for row in rows] == [
        (0, 300, None, 0.5),  # no record: as sampled
        (1, 301, 3, 2.5),  # measured, not sampled
        (2, 302, -9, 2.5),  # never sampled, yet measured
    ]
    assert [row.sample_interval_seconds for row in rows] == [
        rank_watcher.SAMPLE_INTERVAL_SECONDS,
        None,
        None,
    ]
    # Progress: rank 2, which no sample saw, gets its start and end lines from its record.
    events = unsampled_exit_events("baseline_a", samples, measured_exits)
    assert [(event.kind, event.sample.rank, event.sample.pid) for event in events] == [
        ("start", 2, 302),
        ("end", 2, 302),
    ]
    assert events[1].sample.last_seen - events[1].sample.first_seen == 0.5
    assert rank_event_detail(events[1]) == "pid 302, 2.75 CPU s, peak RSS 300 MiB, measured at exit"
    # Restarts: every process of a rank has its own measured exit, in start order.
    exits.write_text(
        json.dumps({**measured, "rank": 1, "pid": 401, "returncode": 0, "started": 9.0, "ended": 9.5}) + "\n"
        + json.dumps({**measured, "rank": 1, "pid": 301, "returncode": 3, "started": 5.0, "ended": 7.5}) + "\n"
    )  # fmt: skip
    rows = rank_evidence(
        samples, phase_returncode=0, stderr_path=stderr, measured=read_rank_exits(exits)
    )
    assert [(row.pid, row.returncode) for row in rows] == [(300, 0), (301, 3), (401, 0)]
    # No file (a fresh agent), or not a torchrun phase: as sampled.
    assert read_rank_exits(tmp_path / "none.jsonl") == read_rank_exits(None) == {}
    missing = rank_evidence(samples, phase_returncode=0, stderr_path=stderr, measured={})
    assert missing == rank_evidence(samples, phase_returncode=0, stderr_path=stderr)


# Real torchrun ------------------------------------------------------------------------


@pytest.mark.parametrize("rank1_exit", [0, 3])
def test_real_torchrun_ranks_get_their_own_rows(tmp_path, rank1_exit):
    script = tmp_path / "burn.py"
    script.write_text(RANK_SCRIPT)
    argv = [*TORCHRUN, "--standalone", "--nproc-per-node=2", str(script), str(rank1_exit)]
    env, tag = phase_environment(argv, {**os.environ, "OMP_NUM_THREADS": "1"}, tmp_path)
    stderr = tmp_path / "stderr.log"
    with RankWatcher() as watcher:
        assert watcher.watch("baseline_a", tag, argv)
        try:
            with stderr.open("w") as stderr_file:
                agent = subprocess.Popen(
                    argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr_file
                )
            try:
                agent.wait(timeout=60)
            finally:
                agent.kill()
                agent.wait()
            samples = watcher.close("baseline_a")
        finally:
            sweep(tag)
            assert tagged_processes(tag) == []
    rows = rank_evidence(samples, phase_returncode=agent.returncode, stderr_path=stderr)
    assert [(row.rank, row.local_rank) for row in rows] == [(0, 0), (1, 1)]
    assert len({row.pid for row in rows}) == 2 and agent.pid not in {row.pid for row in rows}
    assert all(row.user_seconds + row.system_seconds > 0.1 for row in rows)
    assert rows[1].peak_rss_bytes >= rows[0].peak_rss_bytes + (80 << 20)
    if rank1_exit == 0:
        assert agent.returncode == 0
        assert [row.returncode for row in rows] == [0, 0]
    else:
        assert agent.returncode != 0
        # torchrun stopped rank 0 with SIGTERM and its report says so.
        assert rows[1].returncode == 3 and rows[0].returncode == -signal.SIGTERM
        assert isinstance(rows[0], RankProcessEvidence)
