"""docs/distributed.md's FSDP2 project: real fully_shard ranks on gloo, DCP, PASS clean, FAIL per fault.

Nine real check_resume runs and two check_runs, two at a time, each phase
a torchrun job: on 2 ranks throughout (the clean run and four resume bugs);
saved on 2 ranks then resumed on 1 (the clean elastic resume under a
tolerance, and three bugs that only a change of world size shows); 2 ranks
against 1 in check_runs (clean, and gradients summed instead of averaged).
Every assertion reads the reports of those runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.example_projects import copied_project, run_parity_reports

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "fsdp2_project"
RUNS = (
    ("FsdpResumeCase", None),
    ("FreshOptimizerLoadCase", None),
    ("UnevenShardOffsetsCase", None),
    ("CachedStateDictHookCase", None),
    ("SchedulerNotRestoredCase", None),
    ("FsdpResumeCase", "2,1"),
    ("PerRankSamplerPositionCase", "2,1"),
    ("PerRankStepCounterCase", "2,1"),
    ("OptimizerDroppedOnReshardCase", "2,1"),
    ("WorldSizeRunsCase", None),
    ("SummedGradientsRunsCase", None),
)
AT_ONCE = 2


def _label(case: str, sizes: str | None) -> str:
    return case if sizes is None else f"{case}-{sizes.replace(',', '-')}"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    project = copied_project(EXAMPLE, tmp_path_factory.mktemp("fsdp2"))
    runs = [(_label(case, sizes), [case, *([sizes] if sizes else [])]) for case, sizes in RUNS]
    done = run_parity_reports(project, runs, at_once=AT_ONCE, timeout=900)
    return {label: report for label, (_, report) in done.items()}


def _first(report: dict) -> tuple[str, int, str]:
    difference = report["primary_difference"]
    return report["outcome"], report["first_divergent_step"], difference["path"]


def test_the_clean_fsdp2_resume_passes_exactly(reports):
    report = reports["FsdpResumeCase"]
    assert report["outcome"] == "PASS", report["message"]
    assert report["comparison_policy"] == "exact"
    assert "resume_chain" not in report
    assert report["trajectory"]["ranks"] == [0, 1]


def test_the_optimizer_loaded_into_a_fresh_state_dict_fails_at_the_round_trip(reports):
    outcome, step, path = _first(reports["FreshOptimizerLoadCase"])
    assert (outcome, step) == ("FAIL", 2)
    assert path.startswith("rank0.optim.state"), path


def test_an_uneven_shard_restored_at_the_wrong_offset_fails_on_the_last_rank_only(reports):
    report = reports["UnevenShardOffsetsCase"]
    outcome, step, path = _first(report)
    assert (outcome, step, path) == ("FAIL", 2, 'rank1.model["0.weight"]')
    assert report["trajectory"]["first_divergence"]["round_trip"] is True
    # Rank 0's shard (rows 0..128) came back right: no rank0 path at the round trip.
    assert not [p for p in report["trajectory"]["first_divergence"]["paths"] if "rank0" in p]


def test_a_cached_state_dict_with_a_copying_hook_saves_the_initial_model(reports):
    outcome, step, path = _first(reports["CachedStateDictHookCase"])
    assert (outcome, step) == ("FAIL", 2)
    assert path.startswith("rank0.model"), path


def test_a_scheduler_not_restored_fails_at_its_counter(reports):
    assert _first(reports["SchedulerNotRestoredCase"]) == ("FAIL", 2, "rank0.train.epoch")


def test_the_clean_elastic_resume_passes_under_tolerance_on_global_tensors(reports):
    report = reports["FsdpResumeCase-2-1"]
    assert report["outcome"] == "PASS", report["message"]
    assert report["comparison_policy"] == "explicit_tolerance"
    assert [(link["phase"], link["world_size"]) for link in report["resume_chain"]] == [
        ("candidate_split", 2),
        ("candidate_resume", 1),
    ]
    assert report["trajectory"]["compared_on"] == {
        "candidate_resume": "global tensors, reassembled from every rank's shards"
    }
    assert report["trajectory"]["recorded_steps"]["candidate_resume"] == {"rank0": [2, 3, 4]}


def test_a_sampler_position_in_per_rank_units_repeats_samples_after_the_split(reports):
    report = reports["PerRankSamplerPositionCase-2-1"]
    outcome, step, path = _first(report)
    # SameGlobalOrder (the phases ran on different rank counts) names the first global batch.
    assert (outcome, step) == ("FAIL", 3)
    assert path.startswith("coverage.epoch0.global_batch"), path
    assert report["primary_difference"]["reason"] == "global_order"
    assert "consumed again" in report["primary_difference"]["candidate"]


def test_a_step_counter_kept_per_rank_fails_where_the_resumed_run_starts(reports):
    report = reports["PerRankStepCounterCase-2-1"]
    outcome, step, path = _first(report)
    assert (outcome, step, path) == ("FAIL", 2, "step")
    assert (
        report["primary_difference"]["baseline"],
        report["primary_difference"]["candidate"],
    ) == ("2", "1")


def test_an_optimizer_dropped_by_a_resharding_load_fails_at_the_round_trip(reports):
    report = reports["OptimizerDroppedOnReshardCase-2-1"]
    # The param groups went with the dropped state: the scheduled LR is the first path.
    assert _first(report) == ("FAIL", 2, "optim.param_groups[0].lr")
    paths = report["trajectory"]["first_divergence"]["paths"]
    assert 'optim.state["0.weight"].exp_avg' in paths


def test_two_ranks_and_one_agree_under_tolerance_in_check_runs(reports):
    report = reports["WorldSizeRunsCase"]
    assert report["outcome"] == "PASS", report["message"]
    assert report["trajectory"]["compared_on"] == {
        "ranks1_a": "global tensors, reassembled from every rank's shards"
    }


def test_gradients_summed_over_ranks_fail_at_the_gradient(reports):
    report = reports["SummedGradientsRunsCase"]
    outcome, step, path = _first(report)
    assert (outcome, step, path) == ("FAIL", 1, 'grad["0.weight"]')
