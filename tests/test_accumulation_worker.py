"""The accumulation worker run in-process: every plan flag changes what is executed and observed.

`accumulation_worker.execute` is what each child process runs (CONTRACT
§7.5–§7.7); calling it here makes each plan a fraction of a second, so every
flag, loss-accounting rule and failure can be checked one by one. The
process-level behaviour is covered by test_accumulation_checks.py.
"""

from __future__ import annotations

import itertools
import json

import pytest
import torch
from trainparity._internal.accumulation.check import PHASES, AccumulationExecutionPlan
from trainparity._internal.accumulation.worker import execute
from trainparity._internal.comparison.policies import ExactComparison, ToleranceComparison
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.state.snapshot_file import read_snapshot

import tests.fixtures.accumulation_cases as cases

# The scheduler-per-microbatch fault steps the scheduler before the optimizer on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")

TOLERANCE = ToleranceComparison(rtol=1e-6, atol=1e-7)
_numbers = itertools.count()


def run_plan(tmp_path, case: str, plan: AccumulationExecutionPlan, device: str = "cpu"):
    """The worker's result record and, on PASS, its observations by key."""
    path = tmp_path / f"observations-{next(_numbers)}.safetensors"
    record = execute(
        f"tests.fixtures.accumulation_cases:{case}",
        json.dumps(plan.to_dict(), sort_keys=True),
        device,
        23,
        path,
    )
    if record["outcome"] != "PASS":
        return record, None
    return record, read_snapshot(path)[0].state.as_dict()


def first_divergence(tmp_path, case: str, plan: AccumulationExecutionPlan, policy=TOLERANCE):
    """(phase, first difference, all differences of that phase) of baseline vs `plan`, or None."""
    baseline_plan = AccumulationExecutionPlan(1, clip_grad_norm=plan.clip_grad_norm)
    _, baseline = run_plan(tmp_path, case, baseline_plan)
    record, candidate = run_plan(tmp_path, case, plan)
    assert record["outcome"] == "PASS", record
    assert not policy.compare_all(baseline["initial"], candidate["initial"])
    for phase in PHASES:
        differences = policy.compare_all(baseline[phase], candidate[phase])
        if differences:
            return phase, differences[0], differences
    return None


def value(observations, *keys):
    node = observations
    for key in keys:
        node = node.as_dict()[key] if not isinstance(node, dict) else node[key]
    return node


# Observations of a clean plan --------------------------------------------------------------


def test_pass_record_and_observation_layout(tmp_path):
    record, observations = run_plan(tmp_path, "LinearCase", AccumulationExecutionPlan(2))
    assert record["outcome"] == "PASS"
    assert record["equivalence"] == cases.LinearCase.equivalence
    assert record["loss_normalization_captured"] is True
    assert isinstance(record["pid"], int)
    assert sorted(observations) == sorted(["initial", *PHASES])
    assert value(observations, "initial").keys() == [
        "buffer",
        "gradient",
        "model",
        "optimizer",
        "rng",
        "scaler",
        "scheduler",
    ]
    assert value(observations, "loss_accounting").keys() == ["loss_accounting"]
    assert value(observations, "gradient").keys() == ["gradient"]
    assert value(observations, "optimizer_state").keys() == ["optimizer"]
    assert value(observations, "parameter_update").keys() == ["buffer", "model"]
    assert value(observations, "scheduler_state").keys() == ["scaler", "scheduler"]
    assert value(observations, "scheduler_state", "scaler") is None
    assert value(observations, "scheduler_state", "scheduler", "last_epoch") == 1


def test_the_observation_file_carries_the_workers_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    path = tmp_path / "observations.safetensors"
    plan = json.dumps(AccumulationExecutionPlan(2).to_dict(), sort_keys=True)
    record = execute("tests.fixtures.accumulation_cases:LinearCase", plan, "cpu", 23, path)
    assert record["outcome"] == "PASS"
    environment = read_snapshot(path)[1]["environment"]
    assert environment == environment_fingerprint()
    assert environment["variables"]["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_explicit_accounting_record(tmp_path):
    _, observations = run_plan(tmp_path, "LinearCase", AccumulationExecutionPlan(2))
    record = value(observations, "loss_accounting", "loss_accounting")
    assert record.keys() == ["denominator", "effective_loss", "normalization_captured", "numerator"]
    assert value(record, "denominator") == 4.0 and isinstance(value(record, "denominator"), float)
    assert value(record, "normalization_captured") is True
    numerator = value(record, "numerator")
    assert numerator.shape == () and numerator.dtype == "torch.float32"
    effective = value(record, "effective_loss").to_tensor()
    assert torch.allclose(effective, numerator.to_tensor() / 4.0)


def test_value_path_record(tmp_path):
    record, observations = run_plan(tmp_path, "ValueOnlyCase", AccumulationExecutionPlan(2))
    assert record["loss_normalization_captured"] is False
    loss_record = value(observations, "loss_accounting", "loss_accounting")
    assert loss_record.keys() == ["effective_loss", "normalization_captured"]
    assert value(loss_record, "normalization_captured") is False


@pytest.mark.parametrize("case", ["LinearCase", "MLPCase", "TokenCase", "ScalerCase"])
def test_clean_plans_match_the_full_batch(tmp_path, case):
    assert first_divergence(tmp_path, case, AccumulationExecutionPlan(2)) is None


def test_the_initial_state_is_the_same_for_every_plan(tmp_path):
    _, one = run_plan(tmp_path, "MLPCase", AccumulationExecutionPlan(1))
    _, three = run_plan(tmp_path, "MLPCase", AccumulationExecutionPlan(3))
    assert not ExactComparison().compare_all(one["initial"], three["initial"])


# Every flag changes the execution -----------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "plan", "phase", "path", "reason"),
    [
        (
            "LinearCase",
            AccumulationExecutionPlan(
                2, scale_accumulated_loss=False, use_explicit_loss_accounting=False
            ),
            "loss_accounting",
            "loss_accounting.denominator",
            "missing_candidate",
        ),
        (
            "TokenCase",
            AccumulationExecutionPlan(2, use_explicit_loss_accounting=False),
            "loss_accounting",
            "loss_accounting.denominator",
            "missing_candidate",
        ),
        (
            "ValueOnlyCase",
            AccumulationExecutionPlan(2, scale_accumulated_loss=False),
            "loss_accounting",
            "loss_accounting.effective_loss",
            "tensor_value",
        ),
        (
            "LinearCase",
            AccumulationExecutionPlan(2, optimizer_step_per_microbatch=True),
            "gradient",
            "gradient.weight",
            "type",
        ),
        (
            "LinearCase",
            AccumulationExecutionPlan(2, scheduler_step_per_microbatch=True),
            "optimizer_state",
            "optimizer.param_groups[0].lr",
            "value",
        ),
        (
            "LinearCase",
            AccumulationExecutionPlan(2, zero_grad_before_gradient_observation=True),
            "gradient",
            "gradient.weight",
            "type",
        ),
        (
            "ClipCase",
            AccumulationExecutionPlan(2, clip_grad_norm=1.0, clip_per_microbatch=True),
            "gradient",
            "gradient.weight",
            "tensor_value",
        ),
        (
            "ScalerCase",
            AccumulationExecutionPlan(2, amp_step_before_unscale=True),
            "gradient",
            "gradient.weight",
            "tensor_value",
        ),
        (
            "LinearCase",
            AccumulationExecutionPlan(2, omit_final_microbatch=True),
            "loss_accounting",
            "loss_accounting.denominator",
            "value",
        ),
    ],
)
def test_each_fault_flag_is_first_observed_where_expected(
    tmp_path, case, plan, phase, path, reason
):
    observed_phase, first, _ = first_divergence(tmp_path, case, plan)
    assert (observed_phase, first.path, first.reason) == (phase, path, reason)


def test_unscaled_value_path_doubles_the_effective_loss(tmp_path):
    _, first, _ = first_divergence(
        tmp_path, "ValueOnlyCase", AccumulationExecutionPlan(2, scale_accumulated_loss=False)
    )
    assert first.max_rel_error == pytest.approx(1.0)


def test_scheduler_stepped_per_microbatch_decays_twice_before_the_update(tmp_path):
    _, first, _ = first_divergence(
        tmp_path, "LinearCase", AccumulationExecutionPlan(2, scheduler_step_per_microbatch=True)
    )
    assert (first.baseline, first.candidate) == ("0.125", "0.03125")


def test_zeroed_gradients_leave_parameters_unchanged(tmp_path):
    _, observations = run_plan(
        tmp_path,
        "LinearCase",
        AccumulationExecutionPlan(2, zero_grad_before_gradient_observation=True),
    )
    assert value(observations, "gradient", "gradient", "weight") is None
    initial = value(observations, "initial", "model")
    updated = value(observations, "parameter_update", "model")
    assert not ExactComparison().compare_all(initial, updated)


def test_clipping_once_bounds_the_accumulated_gradient(tmp_path):
    _, clipped_run = run_plan(
        tmp_path, "LinearCase", AccumulationExecutionPlan(2, clip_grad_norm=0.01)
    )
    _, unclipped_run = run_plan(tmp_path, "LinearCase", AccumulationExecutionPlan(2))
    clipped = value(clipped_run, "gradient", "gradient", "weight").to_tensor()
    raw = value(unclipped_run, "gradient", "gradient", "weight").to_tensor()
    assert clipped.norm() <= 0.01 + 1e-6 < raw.norm()
    assert torch.allclose(clipped, raw / raw.norm() * 0.01, rtol=1e-5)


def test_amp_step_before_unscale_observes_gradients_still_scaled(tmp_path):
    _, baseline = run_plan(tmp_path, "ScalerCase", AccumulationExecutionPlan(1))
    _, candidate = run_plan(
        tmp_path, "ScalerCase", AccumulationExecutionPlan(2, amp_step_before_unscale=True)
    )
    unscaled = value(baseline, "gradient", "gradient", "weight").to_tensor()
    scaled = value(candidate, "gradient", "gradient", "weight").to_tensor()
    assert torch.allclose(scaled, unscaled * 16.0)
    assert value(candidate, "scheduler_state", "scaler", "scale") == 16.0


def test_scaler_steps_per_microbatch(tmp_path):
    _, first, _ = first_divergence(
        tmp_path, "ScalerCase", AccumulationExecutionPlan(2, optimizer_step_per_microbatch=True)
    )
    assert (first.path, first.reason) == ("gradient.weight", "type")


def test_default_split_is_contiguous_and_ordered(tmp_path, monkeypatch):
    seen = []
    original_loss = cases.LinearCase.loss

    def recording_loss(self, state, batch):
        seen.append(batch["x"].flatten().tolist())
        return original_loss(self, state, batch)

    monkeypatch.setattr(cases.LinearCase, "loss", recording_loss)
    run_plan(tmp_path, "LinearCase", AccumulationExecutionPlan(2))
    run_plan(tmp_path, "LinearCase", AccumulationExecutionPlan(3, omit_final_microbatch=True))
    assert seen == [[1.0, 2.0], [4.0, 8.0], [1.0, 2.0], [4.0]]


def test_the_cases_own_split_is_used(tmp_path, monkeypatch):
    seen = []
    original_loss = cases.ExplicitSplitCase.loss

    def recording_loss(self, state, batch):
        seen.append(batch["x"].flatten().tolist())
        return original_loss(self, state, batch)

    monkeypatch.setattr(cases.ExplicitSplitCase, "loss", recording_loss)
    assert first_divergence(tmp_path, "ExplicitSplitCase", AccumulationExecutionPlan(2)) is None
    assert seen[-2:] == [[1.0, 4.0], [2.0, 8.0]]


# ABSTAIN and ERROR records ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "plan", "message"),
    [
        ("MixedAccountingCase", 2, "loss accounting must be supplied for every microbatch or none"),
        ("ZeroDenominatorCase", 2, "loss denominators must be positive"),
        ("BadSplitterCase", 2, "explicit splitter must return an ordered sequence"),
        ("ShortSplitterCase", 2, "explicit splitter returned the wrong microbatch count"),
        ("ScalarBatchCase", 2, "scalar tensor leaf has no batch dimension"),
        ("LinearCase", 5, "microbatch count exceeds batch length"),
        (
            "LinearCase",
            AccumulationExecutionPlan(1, omit_final_microbatch=True),
            "plan consumed no microbatches",
        ),
    ],
)
def test_abstentions(tmp_path, case, plan, message):
    if isinstance(plan, int):
        plan = AccumulationExecutionPlan(plan)
    record, _ = run_plan(tmp_path, case, plan)
    assert (record["outcome"], record["message"]) == ("ABSTAIN", message)
    assert set(record) == {"outcome", "message", "pid", "equivalence"}


def test_mixed_accounting_abstains_even_on_the_value_path(tmp_path):
    plan = AccumulationExecutionPlan(2, use_explicit_loss_accounting=False)
    record, _ = run_plan(tmp_path, "MixedAccountingCase", plan)
    assert record["outcome"] == "ABSTAIN"


def test_aliased_parameters_abstain_at_initial_capture(tmp_path):
    record, _ = run_plan(tmp_path, "AliasedWeightCase", AccumulationExecutionPlan(2))
    assert record["outcome"] == "ABSTAIN"
    assert record["message"].startswith("initial state capture failed")
    assert "aliases ('weight', 'alias')" in record["message"]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "RaisingLossCase",
            "worker failed: RuntimeError: loss exploded on purpose (raised by case.loss())",
        ),
        ("AmpCase", "worker failed: RuntimeError: AmpCase requires CUDA (raised by case.build())"),
        (
            "FloatLossCase",
            "worker failed: TypeError: case.loss() must return a trainparity LossAccounting, got Tensor",
        ),
        (
            "DictBuildCase",
            "worker failed: TypeError: case.build() must return a trainparity TrainingState, got dict",
        ),
    ],
)
def test_case_failures_are_errors_that_say_what_went_wrong(tmp_path, case, message):
    record, _ = run_plan(tmp_path, case, AccumulationExecutionPlan(2))
    assert (record["outcome"], record["message"]) == ("ERROR", message)


def test_unimportable_case_error_says_where_the_worker_looked(tmp_path):
    record, _ = run_plan(tmp_path, "NoSuchCase", AccumulationExecutionPlan(2))
    assert record["outcome"] == "ERROR"
    assert record["message"].startswith("worker failed: CaseImportError: cannot import case")
    assert "pass cwd=" in record["message"]
    assert "equivalence" not in record


def test_malformed_plan_is_an_error(tmp_path):
    record = execute(
        "tests.fixtures.accumulation_cases:LinearCase",
        json.dumps({"microbatch_count": 2}),
        "cpu",
        23,
        tmp_path / "unused.safetensors",
    )
    assert record["outcome"] == "ERROR"
    assert record["message"].startswith(
        "worker failed: ValueError: plan must have exactly the fields"
    )
