"""docs/distributed.md's example project: a 2-rank torchrun/DDP/DCP job, PASS clean, FAIL per fault.

Five real check_resume runs (four torchrun phases each, 2 ranks on gloo), in
two run_parity.py processes at once; every assertion reads the reports of those runs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from trainparity.checkpoints import load_dcp

from tests.fixtures.example_projects import copied_project, run_parity_groups

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "distributed_project"
# Each group runs in one run_parity.py process, whose checks share its imports and warm servers.
GROUPS = (
    ("DistributedResumeCase", "RngFromOtherRankCase", "FreshOptimizerLoadCase"),
    ("RestartEpochCase", "SkipOptimizerStepsCase"),
)
AT_ONCE = 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, dict]]:
    project = copied_project(EXAMPLE, tmp_path_factory.mktemp("distributed"))
    done = run_parity_groups(
        project, [(group, group) for group in GROUPS], at_once=AT_ONCE, timeout=600
    )
    done["project"] = project  # type: ignore[assignment]
    return done


def _paths(report: dict) -> list[str]:
    return [difference["path"] for difference in report["all_differences"]]


def test_clean_distributed_case_passes(runs):
    completed, report = runs["DistributedResumeCase"]
    assert report["outcome"] == "PASS", report["message"]
    assert "DistributedResumeCase PASS final states are exactly" in completed.stdout
    assert completed.returncode == 1  # the group's other cases FAIL
    assert [process["phase"] for process in report["processes"]] == [
        "baseline_a",
        "baseline_b",
        "candidate_split",
        "candidate_resume",
    ]
    # One row per rank; the suite's warm agents fork their ranks and measure each one's exit.
    for process in report["processes"]:
        assert [rank["rank"] for rank in process["ranks"]] == [0, 1], process
        assert [rank["sample_interval_seconds"] for rank in process["ranks"]] == [None, None]
        assert [rank["returncode"] for rank in process["ranks"]] == [0, 0]
        assert len({rank["pid"] for rank in process["ranks"]} | {process["pid"]}) == 3
        assert all(rank["peak_rss_bytes"] > 50 << 20 for rank in process["ranks"])
    # Progress names each rank of each phase.
    for phase in ("baseline_a", "candidate_resume"):
        for rank in (0, 1):
            assert f"trainparity: {phase} rank {rank} started" in completed.stderr
            assert f"trainparity: {phase} rank {rank} finished in" in completed.stderr
    run_dir = runs["project"] / ".trainparity-runs" / "DistributedResumeCase"
    # torchrun's logs of every rank stay inside the phase's directory.
    assert len(list((run_dir / "candidate_resume" / "ranks").glob("*/attempt_0/1/stderr.log"))) == 1


def test_rng_restored_from_the_wrong_rank_fails(runs):
    _completed, report = runs["RngFromOtherRankCase"]
    assert report["outcome"] == "FAIL"
    assert report["primary_difference"]["path"].startswith("model")
    rng_paths = [path for path in _paths(report) if path.startswith("rng")]
    assert rng_paths == [
        "rng.rank0.python",
        "rng.rank0.torch_cpu",
        "rng.rank1.python",
        "rng.rank1.torch_cpu",
    ]


def test_dcp_load_into_a_fresh_optimizer_state_dict_fails_at_the_optimizer_state(runs):
    _completed, report = runs["FreshOptimizerLoadCase"]
    assert report["outcome"] == "FAIL"
    assert any(path.startswith('optim.state["0.weight"].exp_avg') for path in _paths(report))
    assert not any(path.startswith("coverage") for path in _paths(report))


@pytest.mark.parametrize(
    ("case", "repeated"),
    [("RestartEpochCase", "consumed again"), ("SkipOptimizerStepsCase", "consumed again")],
)
def test_sample_position_faults_fail_at_the_first_repeated_id_and_its_rank(runs, case, repeated):
    _completed, report = runs[case]
    primary = report["primary_difference"]
    assert report["outcome"] == "FAIL"
    assert report["message"] == "first observed divergence at step 4: coverage.epoch0.rank0"
    assert primary["reason"] == "sample_repeated" and repeated in primary["candidate"]
    assert "candidate_resume's position 0" in primary["candidate"]
    assert {"coverage.epoch0.rank0", "coverage.epoch0.rank1"} <= set(_paths(report))


def test_load_dcp_reads_the_two_rank_checkpoint_in_one_process(runs):
    checkpoint = runs["project"] / ".trainparity-runs" / "DistributedResumeCase" / "baseline_a"
    state = load_dcp(checkpoint / "checkpoint")
    assert sorted(state) == ["model", "optim", "train"]
    assert state["train"] == {"step": 4}
    assert state["model"]["0.weight"].shape == (8, 4)
    assert sorted(state["optim"]["state"]["0.weight"]) == ["exp_avg", "exp_avg_sq", "step"]
    assert state["optim"]["param_groups"][0]["params"] == [
        "0.weight",
        "0.bias",
        "2.weight",
        "2.bias",
    ]
    assert sorted(load_dcp(checkpoint / "checkpoint", keys={"train"})) == ["train"]
