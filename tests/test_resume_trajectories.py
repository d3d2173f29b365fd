"""check_resume with record(): the reference faults (ANCHOR_CASES §1.3) found at the prototype's step and path.

Each case's trainer records after loading and after every step. All checks
run once, concurrently (one thread per child), in a module fixture.
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import trainparity
from trainparity import ExactComparison, Outcome
from trainparity._internal.recording import recording_to
from trainparity._internal.resume.recordings import RECORDINGS_DIRECTORY, ResumeTrajectories
from trainparity._internal.state.paths import path_under

from tests.test_resume_faults import FAULTS as FINAL_STATE_FAULTS

REPO_ROOT = Path(__file__).resolve().parents[1]
CASE_MODULE = "tests.fixtures.resume_faults"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TRAINPARITY_DEVICE": "cpu"}

# fault case -> (step, first path) recorded by the prototype (ANCHOR_CASES §1.3).
PROTOTYPE = {
    "MissingModelCase": (2, "model.bias"),
    "MissingOptimizerCase": (2, "optimizer.param_groups[0].lr"),
    "MissingSchedulerCase": (2, "scheduler._last_lr[0]"),
    "MissingPythonRngCase": (2, "rng.python[1][0]"),
    "MissingNumpyRngCase": (2, "rng.numpy.keys.values[0]"),
    "MissingTorchCpuRngCase": (2, "rng.torch_cpu"),
    "CursorOffsetCase": (3, "batch.sample_ids[0]"),
    "StepOffByOneCase": (2, "step"),
    "OptimizerGroupMismatchCase": (2, "optimizer.param_groups[0].lr"),
    "ExtraSchedulerStepCase": (2, "scheduler._step_count"),
    "MissingHiddenGlobalCase": (2, "extra.hidden_module_counter"),
}
CONTROLS = ("DeterministicCase", "NondeterministicCase")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("trajectories")

    def run(name: str):
        return trainparity.check_resume(
            f"{CASE_MODULE}:Recorded{name}",
            cwd=REPO_ROOT,
            temporary_root=root,
            environment=ONE_THREAD,
        )

    names = (*PROTOTYPE, *CONTROLS)
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
        outcomes = dict(zip(names, pool.map(run, names), strict=True))
    assert list(root.iterdir()) == []  # every check removed its run directory
    return outcomes


@pytest.mark.parametrize("name", PROTOTYPE)
def test_fault_fails_at_the_prototypes_step_and_path(results, name):
    step, path = PROTOTYPE[name]
    result = results[name]
    assert result.outcome is Outcome.FAIL, result.message
    assert result.message == f"first observed divergence at step {step}: {path}"
    assert result.first_divergent_step == step
    assert result.primary_difference.path == path
    assert result.primary_difference == result.all_differences[0]
    divergence = result.trajectory["first_divergence"]
    assert (divergence["step"], divergence["candidate_phase"]) == (step, "candidate_resume")
    # The resumed process's first record (right after loading) is the round trip.
    assert divergence["round_trip"] is (step == 2)
    # The final-state comparison is still made, and reports what it always did.
    final_primary, _ = FINAL_STATE_FAULTS[name].primary
    assert result.final_state_differences[0].path == final_primary
    json.dumps(result.to_dict())  # the report stays serialisable


def test_step_off_by_one_is_a_claim_at_the_split_step(results):
    result = results["StepOffByOneCase"]
    claim = result.primary_difference
    assert (claim.path, claim.reason, claim.baseline, claim.candidate) == ("step", "step", "2", "3")
    assert result.trajectory["recorded_steps"]["candidate_resume"] == [3, 4]


def test_later_step_reports_tensor_magnitudes(results):
    result = results["CursorOffsetCase"]
    errors = result.trajectory["first_divergence"]["relative_rms_errors"]
    assert errors["model.weight"] > 0
    assert result.trajectory["first_divergence"]["error_bounds"]["model.weight"] == "exact"


def test_clean_case_passes_with_every_step_compared(results):
    result = results["DeterministicCase"]
    assert result.outcome is Outcome.PASS, result.message
    assert result.trajectory == {
        "ranks": [0],
        "recorded_steps": {
            "baseline_a": [1, 2, 3, 4],
            "baseline_b": [1, 2, 3, 4],
            "candidate_split": [1, 2],
            "candidate_resume": [2, 3, 4],
        },
        "first_divergence": None,
    }
    assert result.final_state_differences == ()


def test_baselines_that_part_abstain_at_their_first_step(results):
    result = results["NondeterministicCase"]
    assert result.outcome is Outcome.ABSTAIN
    assert result.message == (
        "baseline self-consistency failed at step 1; resume attribution is unsafe"
    )
    assert result.first_divergent_step == 1
    # The noise goes into the first parameter, the weight, after each step.
    assert result.primary_difference.path == "model.weight"
    assert result.primary_difference.max_abs_error > 0
    divergence = result.trajectory["first_divergence"]
    assert (divergence["baseline_phase"], divergence["candidate_phase"]) == (
        "baseline_a",
        "baseline_b",
    )
    assert divergence["relative_rms_errors"]["model.weight"] > 0


# Several ranks: differences name their rank ---------------------------------------------------


def _write_phases(run_root: Path, ranks, *, resumed_rng_of_rank1: float = 0.0):
    """The four phases' recordings as check_resume lays them out (split at 2, total 3).

    Every rank records the same trajectory, except that rank 1's resumed run
    may come back with its RNG shifted by `resumed_rng_of_rank1`.
    """

    def state(step, rank, shift=0.0):
        return {
            "model": {"w": torch.full((3,), float(step))},
            "rng": {"torch": torch.full((2,), float(rank) + shift)},
            "step": step,
        }

    phases = {
        "baseline_a": [1, 2, 3], "baseline_b": [1, 2, 3],
        "candidate_split": [1, 2], "candidate_resume": [2, 3],
    }  # fmt: skip
    for phase, steps in phases.items():
        for rank in ranks:
            shift = resumed_rng_of_rank1 if phase == "candidate_resume" and rank == 1 else 0.0
            with recording_to(run_root / RECORDINGS_DIRECTORY / phase, rank=rank):
                for step in steps:
                    trainparity.record(step, state(step, rank, shift))


def _trajectories(run_root: Path):
    trajectories = ResumeTrajectories(
        run_root, ExactComparison(), (("candidate_split", 0, False), ("candidate_resume", 2, False))
    )
    return trajectories, trajectories.baselines_part(), trajectories.candidates_part()


def test_several_ranks_put_each_difference_under_its_rank(tmp_path):
    _write_phases(tmp_path, ranks=(0, 1), resumed_rng_of_rank1=0.5)
    trajectories, baselines, candidates = _trajectories(tmp_path)
    assert baselines is None
    assert (candidates.step, candidates.rank, candidates.round_trip) == (2, 1, True)
    assert [difference.path for difference in candidates.differences] == ["rank1.rng.torch"]
    fields = trajectories.report_fields(())["trajectory"]
    assert fields["ranks"] == [0, 1]
    assert fields["first_divergence"]["paths"] == ["rank1.rng.torch"]
    assert fields["first_divergence"]["error_bounds"] == {"rank1.rng.torch": "exact"}
    assert list(fields["first_divergence"]["relative_rms_errors"]) == ["rank1.rng.torch"]
    assert fields["recorded_steps"] == {
        "baseline_a": {"rank0": [1, 2, 3], "rank1": [1, 2, 3]},
        "baseline_b": {"rank0": [1, 2, 3], "rank1": [1, 2, 3]},
        "candidate_split": {"rank0": [1, 2], "rank1": [1, 2]},
        "candidate_resume": {"rank0": [2, 3], "rank1": [2, 3]},
    }


def test_one_rank_keeps_the_plain_paths(tmp_path):
    _write_phases(tmp_path, ranks=(1,), resumed_rng_of_rank1=0.5)
    trajectories, _, candidates = _trajectories(tmp_path)
    assert [difference.path for difference in candidates.differences] == ["rng.torch"]
    fields = trajectories.report_fields(())["trajectory"]
    assert fields["ranks"] == [1] and fields["first_divergence"]["paths"] == ["rng.torch"]
    assert fields["recorded_steps"]["candidate_resume"] == [2, 3]


def test_rank_prefix_follows_path_rendering():
    assert path_under("rank1", "rng.torch") == "rank1.rng.torch"
    assert path_under("rank1", '["a.b"].c') == 'rank1["a.b"].c'
    assert path_under("rank1", "[0]") == "rank1[0]"
    assert path_under("rank1", "$") == "rank1"


def test_two_ranks_under_torchrun_name_the_rank_that_restored_the_wrong_rng(tmp_path):
    """A real 2-rank job (gloo, CPU): only rank 1 restores the wrong RNG file on resume."""
    result = trainparity.check_resume(
        "tests.fixtures.distributed.cases:RecordedRank1RngCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        environment={"OMP_NUM_THREADS": "1"},
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.message == "first observed divergence at step 1: rank1.rng.torch"
    assert result.first_divergent_step == 1
    assert [difference.path for difference in result.all_differences] == ["rank1.rng.torch"]
    assert result.primary_difference == result.all_differences[0]
    divergence = result.trajectory["first_divergence"]
    assert (divergence["rank"], divergence["round_trip"]) == (1, True)
    assert result.trajectory["ranks"] == [0, 1]
    assert result.trajectory["recorded_steps"]["candidate_resume"] == {
        "rank0": [1, 2],
        "rank1": [1, 2],
    }
    # The final states (observed from the checkpoint) differ at rank 1's RNG file too.
    assert "rng.rank1" in [difference.path for difference in result.final_state_differences]
    json.dumps(result.to_dict())
