"""The pieces of an own-step check in-process: the step observer, the returned-loss record, the plan rule.

The observer wraps real torch optimizers and schedulers; these tests show
that it counts and captures at the right moments and leaves the instances
exactly as it found them, also when the user's step raises.
"""

from __future__ import annotations

import json

import pytest
import torch
from trainparity._internal.accumulation.check import AccumulationExecutionPlan
from trainparity._internal.accumulation.user_step import (
    MixedAccounting,
    StepObserver,
    check_own_step_plan,
    has_train_step,
    returned_loss_record,
)
from trainparity._internal.accumulation.worker import execute
from trainparity._internal.state.snapshot_file import read_snapshot
from trainparity.outcomes import Outcome
from trainparity.protocols import LossAccounting

import tests.fixtures.own_step_cases as cases

pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")


def linear_state():
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    return model, optimizer, scheduler


def backward(model: torch.nn.Module) -> None:
    model(torch.ones(1, 2)).sum().backward()


def test_the_observer_counts_and_captures_gradients_before_and_state_after_the_step():
    model, optimizer, scheduler = linear_state()
    backward(model)
    with StepObserver(optimizer, scheduler, model, observe=True) as observer:
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)  # after the step: the captured gradients stay
        scheduler.step()
    assert (observer.optimizer_step_calls, observer.scheduler_step_calls) == (1, 2)
    gradient = observer.gradient.snapshot.state.as_dict()["gradient"].as_dict()["weight"]
    assert gradient.to_tensor().tolist() == [[1.0, 1.0]]
    optimizer_state = observer.optimizer_state.snapshot.state.as_dict()["optimizer"]
    groups = optimizer_state.as_dict()["param_groups"]
    assert groups.items[0].as_dict()["lr"] == 0.5  # observed when the step returned


def test_the_observer_restores_the_instances_as_it_found_them_even_when_the_step_raises():
    model, optimizer, scheduler = linear_state()
    patched_by_the_scheduler = vars(optimizer)["step"]  # LRScheduler wraps optimizer.step itself
    assert "step" not in vars(scheduler)
    with pytest.raises(RuntimeError, match="user step failed"):
        with StepObserver(optimizer, scheduler, model, observe=False):
            assert vars(optimizer)["step"] is not patched_by_the_scheduler
            raise RuntimeError("user step failed")
    assert vars(optimizer)["step"] is patched_by_the_scheduler
    assert "step" not in vars(scheduler)
    assert type(scheduler).step is scheduler.step.__func__


def test_the_scheduler_state_leaves_out_the_observers_own_wrapper():
    model, optimizer, scheduler = linear_state()
    with StepObserver(optimizer, scheduler, model, observe=False) as observer:
        scheduler.step()
        state = observer.counted_scheduler_state()
    assert "step" not in state and state["step_calls"] == 1
    assert state["last_epoch"] == 1


def test_the_loss_record_sums_what_was_back_propagated_and_the_declared_accounting():
    terms = [
        LossAccounting(torch.tensor(0.25), numerator=torch.tensor(3.0), denominator=4),
        LossAccounting(torch.tensor(0.5), numerator=torch.tensor(6.0), denominator=8),
    ]
    record = returned_loss_record(terms)
    assert float(record["effective_loss"]) == 0.75
    assert float(record["numerator"]) == 9.0 and record["denominator"] == 12.0
    assert record["normalization_captured"] is True
    values_only = returned_loss_record([LossAccounting(torch.tensor(0.25))])
    assert set(values_only) == {"effective_loss", "normalization_captured"}
    assert returned_loss_record(None) is None
    with pytest.raises(MixedAccounting):
        returned_loss_record([terms[0], LossAccounting(torch.tensor(0.5))])


@pytest.mark.parametrize(
    ("returned", "detail"),
    [
        ({"loss": 1.0}, "got dict"),
        ("loss", "got str"),
        ([], "returned an empty sequence"),
        ([0.5], "got float at index 0"),
        ([LossAccounting(0.5)], "LossAccounting.value at index 0 must be a torch.Tensor"),
    ],
)
def test_the_loss_record_rejects_what_it_cannot_account(returned, detail):
    with pytest.raises(TypeError, match=detail):
        returned_loss_record(returned)


def test_only_the_microbatch_count_and_the_reference_clip_norm_go_with_an_own_step():
    check_own_step_plan(AccumulationExecutionPlan(4, clip_grad_norm=1.0))
    with pytest.raises(ValueError, match="leave scale_accumulated_loss, clip_per_microbatch"):
        check_own_step_plan(
            AccumulationExecutionPlan(
                2, scale_accumulated_loss=False, clip_grad_norm=1.0, clip_per_microbatch=True
            )
        )
    assert has_train_step(cases.TokenLoopCase())
    assert not has_train_step(object())


def run_worker(tmp_path, case: str, *, own_step: bool, count: int = 2):
    path = tmp_path / f"{case}-{own_step}.safetensors"
    record = execute(
        f"tests.fixtures.own_step_cases:{case}",
        json.dumps(AccumulationExecutionPlan(count).to_dict(), sort_keys=True),
        "cpu",
        23,
        path,
        own_step=own_step,
    )
    observations = read_snapshot(path)[0].state.as_dict() if record["outcome"] == "PASS" else None
    return record, observations


def test_every_child_of_an_own_step_check_counts_its_step_calls(tmp_path):
    record, reference = run_worker(tmp_path, "TokenLoopCase", own_step=False, count=1)
    assert record["outcome"] == Outcome.PASS
    optimizer = reference["optimizer_state"].as_dict()["optimizer"].as_dict()
    scheduler = reference["scheduler_state"].as_dict()["scheduler"].as_dict()
    assert (optimizer["step_calls"], scheduler["step_calls"]) == (1, 1)
    assert "step" not in scheduler


def test_an_unreported_loss_is_an_unobserved_phase(tmp_path):
    record, observations = run_worker(tmp_path, "SilentTokenLoopCase", own_step=True)
    assert record["outcome"] == Outcome.PASS
    assert record["unobserved_phases"] == ["loss_accounting"]
    assert "loss_accounting" not in observations
    assert record["loss_normalization_captured"] is False


def test_own_step_needs_a_case_with_train_step(tmp_path):
    path = tmp_path / "observations.safetensors"
    record = execute(
        "tests.fixtures.accumulation_cases:LinearCase",
        json.dumps(AccumulationExecutionPlan(2).to_dict(), sort_keys=True),
        "cpu",
        23,
        path,
        own_step=True,
    )
    assert record["outcome"] == Outcome.ERROR
    assert "--own-step needs a case with a callable train_step" in record["message"]
