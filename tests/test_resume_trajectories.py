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
import trainparity
from trainparity import Outcome

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
