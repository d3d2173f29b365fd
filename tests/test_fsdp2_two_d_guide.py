"""docs/distributed.md's 2-D meshes: the FSDP2 project on 4 gloo ranks, FSDP2 x TP and HSDP, PASS clean, FAIL per fault.

Five real check_resume runs in two run_parity.py processes at once, each
running its checks in turn (imports paid once); every phase forks its 4
ranks from one process (`--fork-ranks`). Model, optimizer, LR scheduler,
data position and each rank's dropout generator are saved (DCP plus one
file per rank) and recorded after loading and after every step. Every
assertion reads the reports of those runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.example_projects import copied_project, run_parity_groups

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "fsdp2_project"
CHECKS = (
    ("TwoDimResumeCase", "TpOptimizerDroppedCase", "TpRngNotRestoredCase"),
    ("HsdpResumeCase", "EmbeddingReplicatedOnLoadCase"),
)
AT_ONCE = 2


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    project = copied_project(EXAMPLE, tmp_path_factory.mktemp("fsdp2_two_d"))
    groups = [(list(checks), [*checks, "--fork-ranks"]) for checks in CHECKS]
    done = run_parity_groups(project, groups, at_once=AT_ONCE, timeout=900)
    return {label: report for label, (_, report) in done.items()}


def _first(report: dict) -> tuple[str, int, str, str]:
    difference = report["primary_difference"]
    return (
        report["outcome"],
        report["first_divergent_step"],
        difference["path"],
        difference["reason"],
    )


@pytest.mark.parametrize("case", ["TwoDimResumeCase", "HsdpResumeCase"])
def test_the_clean_two_d_resume_passes_exactly_on_four_ranks(reports, case):
    report = reports[case]
    assert report["outcome"] == "PASS", report["message"]
    assert report["comparison_policy"] == "exact"
    assert report["trajectory"]["ranks"] == [0, 1, 2, 3]


def test_tp_sharded_moments_dropped_on_load_fail_at_the_round_trip(reports):
    report = reports["TpOptimizerDroppedCase"]
    assert _first(report) == (
        "FAIL",
        2,
        'rank0.optim.state["down.weight"]',
        "missing_candidate",
    )
    assert report["trajectory"]["first_divergence"]["round_trip"] is True
    # Every TP-sharded parameter lost its moments; the FSDP-only biases kept theirs.
    paths = report["trajectory"]["first_divergence"]["paths"]
    assert paths == [
        'rank0.optim.state["down.weight"]',
        'rank0.optim.state["embed.weight"]',
        'rank0.optim.state["up.bias"]',
        'rank0.optim.state["up.weight"]',
    ]


def test_a_shard_loaded_replicated_is_a_layout_difference_not_a_value_pass(reports):
    report = reports["EmbeddingReplicatedOnLoadCase"]
    assert _first(report) == ("FAIL", 2, 'rank0.model["embed.weight"]', "tensor_placement")
    difference = report["primary_difference"]
    assert "[_StridedShard(dim=0, sf=2), Shard(dim=0)]" in difference["baseline"]
    assert "mesh 2 [Shard(dim=0)]" in difference["candidate"]  # replicated over "tp"
    # Only the embedding and its moments moved: nothing else differs at the round trip.
    assert report["trajectory"]["first_divergence"]["paths"] == [
        'rank0.model["embed.weight"]',
        'rank0.optim.state["embed.weight"].exp_avg',
        'rank0.optim.state["embed.weight"].exp_avg_sq',
    ]


def test_a_tp_rank_whose_dropout_generator_is_not_restored_fails_on_that_rank(reports):
    report = reports["TpRngNotRestoredCase"]
    assert _first(report) == ("FAIL", 2, "rank1.rng.dropout", "tensor_value")
    # Rank 0, the first TP rank of its group, restored its stream: it is not named.
    assert report["trajectory"]["first_divergence"]["rank"] == 1
