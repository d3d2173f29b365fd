"""docs/distributed.md's FSDP2 project: real fully_shard ranks on gloo, DCP, PASS clean, FAIL per fault.

Nine real check_resume runs and one check_runs, in two run_parity.py
processes at once, each running its checks in turn (its imports paid once).
Every phase forks its ranks from one process (`--fork-ranks`: the same
training as under torchrun, without the three fresh interpreters per phase
that torchrun costs; torchrun itself is exercised by the DDP guide's
tests). On 2 ranks throughout: the clean run and four resume bugs; saved on
2 ranks then resumed on 1: three bugs that only a change of world size
shows; a clean chain saved on 2 ranks, resumed on 3 and saved, resumed on 1
(under a tolerance); in check_runs 1 rank against 2, and against 2 whose
gradients are summed instead of averaged. Every assertion reads the reports
of those runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.example_projects import copied_project, run_parity_groups

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "fsdp2_project"
CHECKS = (
    (
        "FreshOptimizerLoadCase",
        "UnevenShardOffsetsCase",
        "CachedStateDictHookCase",
        "SchedulerNotRestoredCase",
        "SummedGradientsRunsCase",
    ),
    (
        "FsdpResumeCase",
        "ElasticChainCase 2,3,1",
        "PerRankSamplerPositionCase 2,1",
        "PerRankStepCounterCase 2,1",
        "OptimizerDroppedOnReshardCase 2,1",
    ),
)
AT_ONCE = 2


def _group(checks: tuple[str, ...], *options: str) -> tuple[list[str], list[str]]:
    """(report labels, run_parity.py arguments) of checks written `Case [sizes]`."""
    labels = [check.replace(" ", "-").replace(",", "-") for check in checks]
    arguments = [word for check in checks for word in check.split()]
    return labels, [*arguments, *options]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    project = copied_project(EXAMPLE, tmp_path_factory.mktemp("fsdp2"))
    groups = [_group(checks, "--fork-ranks") for checks in CHECKS]
    done = run_parity_groups(project, groups, at_once=AT_ONCE, timeout=900)
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


def test_the_clean_resumes_from_two_ranks_on_three_then_on_one_pass_under_tolerance(reports):
    report = reports["ElasticChainCase-2-3-1"]
    assert report["outcome"] == "PASS", report["message"]
    assert report["comparison_policy"] == "explicit_tolerance"
    assert [(link["phase"], link["world_size"]) for link in report["resume_chain"]] == [
        ("candidate_split", 2),
        ("candidate_resume_1", 3),
        ("candidate_resume", 1),
    ]
    reassembled = "global tensors, reassembled from every rank's shards"
    assert report["trajectory"]["compared_on"] == {
        "candidate_resume_1": reassembled,
        "candidate_resume": reassembled,
    }
    recorded = report["trajectory"]["recorded_steps"]
    assert recorded["candidate_resume_1"] == {"rank0": [2, 3], "rank1": [2, 3], "rank2": [2, 3]}
    assert recorded["candidate_resume"] == {"rank0": [3, 4]}


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


def test_two_ranks_agree_with_one_and_summed_gradients_fail_at_the_gradient(reports):
    report = reports["SummedGradientsRunsCase"]
    outcome, step, path = _first(report)
    assert (outcome, step, path) == ("FAIL", 1, 'grad["0.weight"]')
    assert report["divergent_variant"] == "ranks2_summed"
    # The clean 2 ranks were compared with 1 rank too, and agreed under the tolerance.
    against_one = {
        comparison["variant"]: comparison["outcome"]
        for comparison in report["variant_comparisons"]
        if comparison["reference"] == "ranks1" and comparison["variant"] != "ranks1"
    }
    assert against_one == {"ranks2": "PASS", "ranks2_summed": "FAIL"}
    assert report["trajectory"]["compared_on"] == {
        "ranks2_a": "global tensors, reassembled from every rank's shards",
        "ranks2_summed_a": "global tensors, reassembled from every rank's shards",
    }
