"""Every phase of a check runs with one thread count: the fair share of the cores, or the user's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import trainparity
from trainparity import Outcome, ToleranceComparison
from trainparity._internal.accumulation.plan import AccumulationExecutionPlan
from trainparity._internal.distributed.torchrun_argv import local_ranks, torchrun_command
from trainparity._internal.environment import usable_cores
from trainparity._internal.processes.threads import ChildThreads, child_threads

REPO_ROOT = Path(__file__).resolve().parents[1]
RESUME_CASE = "tests.fixtures.process_resume_cases:ThreadCountProcessCase"
ACCUMULATION_CASE = "tests.fixtures.accumulation_cases:ThreadCountCase"
RESUME_PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")


def fair_share(concurrent_when_parallel: int) -> int:
    """What a check on this machine should decide, computed here from the definition."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    concurrent = concurrent_when_parallel if cores > 1 else 1  # one core: children run in turn
    return max(1, cores // concurrent)


def recorded_threads(work_dir: Path) -> dict[str, int]:
    """The intra-op thread count each resume phase's torch started with, from its checkpoint."""
    return {
        phase: torch.load(work_dir / phase / "checkpoint.pt", weights_only=True)["intra_op_threads"]
        for phase in RESUME_PHASES
    }


@pytest.fixture
def no_thread_variables(monkeypatch):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


def test_every_resume_phase_runs_with_the_fair_share(tmp_path, no_thread_variables):
    events = []
    result = trainparity.check_resume(
        RESUME_CASE, cwd=REPO_ROOT, work_dir=tmp_path / "work", progress=events.append
    )
    assert result.outcome is Outcome.PASS, result.message
    expected = fair_share(3)
    assert recorded_threads(tmp_path / "work") == dict.fromkeys(RESUME_PHASES, expected)
    decided = result.environment["child_threads"]
    assert decided["source"] == "fair_share"
    assert decided["threads_per_child"] == expected
    assert decided["usable_cores"] == usable_cores()
    assert result.environment["variables"]["OMP_NUM_THREADS"] == str(expected)
    starts = {event.phase: event.detail for event in events if event.kind == "start"}
    for phase in RESUME_PHASES:
        assert starts[phase] == f"threads: {expected}, {decided['reason']}"


@pytest.mark.parametrize("where", ["environment", "parent"])
def test_the_users_omp_num_threads_is_kept(tmp_path, monkeypatch, no_thread_variables, where):
    # Two threads: what a 2-core machine would never pick as the fair share of 3 children.
    options = {}
    if where == "environment":
        options["environment"] = {"OMP_NUM_THREADS": "2"}
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
    result = trainparity.check_resume(
        RESUME_CASE, cwd=REPO_ROOT, work_dir=tmp_path / "work", **options
    )
    assert result.outcome is Outcome.PASS, result.message
    assert recorded_threads(tmp_path / "work") == dict.fromkeys(RESUME_PHASES, 2)
    decided = result.environment["child_threads"]
    assert decided["source"] == "user"
    assert decided["threads_per_child"] is None
    assert decided["reason"] == "the user's OMP_NUM_THREADS=2 kept"


def test_every_accumulation_worker_runs_with_the_fair_share(tmp_path, no_thread_variables):
    expected = fair_share(3)
    # The case refuses to build unless its worker's torch runs `expected` threads.
    result = trainparity.check_accumulation(
        ACCUMULATION_CASE,
        candidate=AccumulationExecutionPlan(2),
        comparison=ToleranceComparison(rtol=1e-6, atol=1e-7),
        cwd=REPO_ROOT,
        environment={"TRAINPARITY_TEST_EXPECTED_THREADS": str(expected)},
    )
    assert result.outcome is Outcome.PASS, result.message
    assert result.environment["child_threads"]["threads_per_child"] == expected


def test_the_fair_share_is_the_cores_over_the_concurrent_children():
    decided = child_threads({}, 3)
    assert decided.count == max(1, usable_cores() // 3)
    assert (
        decided.reason == f"fair share of {usable_cores()} usable cores over 3 concurrent children"
    )
    assert child_threads({}, 1).count == usable_cores()
    assert child_threads({"MKL_NUM_THREADS": "3"}, 3).count is None


def test_ranks_share_the_phase_threads_and_a_phase_setting_wins():
    threads = ChildThreads(count=6, reason="fair share", usable_cores=12, concurrent_children=2)
    assert threads.environment({"A": "1"}) == {"A": "1", "OMP_NUM_THREADS": "6"}
    assert threads.environment({}, ranks=4)["OMP_NUM_THREADS"] == "1"
    assert threads.environment({}, ranks=8)["OMP_NUM_THREADS"] == "1"  # at least one
    assert threads.describe(4) == "threads: 1 per rank over 4 ranks, fair share"
    # A check_runs variant's own variable is the user's setting for that phase.
    own = {"MKL_NUM_THREADS": "5"}
    assert "OMP_NUM_THREADS" not in threads.environment({}, own=own)
    assert threads.describe(own=own) == "threads: the phase's own MKL_NUM_THREADS=5 kept"
    users = ChildThreads(
        count=None,
        reason="the user's OMP_NUM_THREADS=3 kept",
        usable_cores=12,
        concurrent_children=2,
    )
    assert users.environment({"OMP_NUM_THREADS": "3"}, ranks=2) == {"OMP_NUM_THREADS": "3"}


def test_local_ranks_reads_torchruns_nproc_per_node():
    assert local_ranks(torchrun_command(["train.py"], nproc_per_node=3), {}) == 3
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"]
    assert local_ranks(argv, {}) == 2
    assert local_ranks([sys.executable, "train.py"], {}) == 1
