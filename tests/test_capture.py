"""Live capture and optimizer canonicalisation (ANCHOR_CASES §4.2, §4.4; CONTRACT §4.4, §4.5).

Only contract names are used (`trainparity._internal.state.snapshot.capture_snapshot`, the
comparison policies, frozen values' `entries` and `to_tensor()`), so the file
also runs against TrainParity 0.1.0 for black-box confirmation.
"""

from __future__ import annotations

import random

import numpy
import torch
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.state.snapshot_capture import (
    CaptureIssue,
    CaptureResult,
    capture_snapshot,
)
from trainparity.outcomes import Outcome


class LayerModel(torch.nn.Module):
    """`Linear(2, 1)` under `layer`, and an integer buffer `count`."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 1)
        self.register_buffer("count", torch.tensor(2))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.layer(inputs)


class StateDictOwner:
    def __init__(self, state: dict) -> None:
        self.state = state

    def state_dict(self) -> dict:
        return self.state


class BrokenStateDict:
    def state_dict(self) -> dict:
        raise RuntimeError("boom")


def lookup(frozen: object, *keys: object) -> object:
    """Follow mapping keys and sequence indices through a frozen tree."""
    node = frozen
    for key in keys:
        if isinstance(key, int):
            node = node.items[key]
        else:
            node = dict(node.entries)[key]
    return node


def keys_of(frozen: object) -> list[str]:
    return [key for key, _ in frozen.entries]


def captured(*args, **kwargs):
    result = capture_snapshot(*args, **kwargs)
    assert result.outcome == Outcome.PASS, result.issue
    return result.snapshot


def test_capture_records_model_buffers_gradients_extras_and_rng():  # P1
    random.seed(2)
    numpy.random.seed(2)
    torch.manual_seed(2)
    model = LayerModel()
    model(torch.ones(1, 2)).sum().backward()
    snapshot = captured(
        model, step=3, extras={"ema": StateDictOwner({"nested": {"value": 4}})}, capture_rng=True
    )
    assert snapshot.step == 3
    state = snapshot.state
    assert lookup(state, "model", "layer", "weight").to_tensor().shape == (1, 2)
    assert lookup(state, "buffer", "count").to_tensor().item() == 2
    assert torch.equal(lookup(state, "gradient", "layer", "weight").to_tensor(), torch.ones(1, 2))
    assert lookup(state, "extra", "ema", "nested", "value") == 4
    assert "torch_cpu" in keys_of(lookup(state, "rng"))
    assert lookup(state, "rng", "numpy", "algorithm") == "MT19937"
    python_rng = lookup(state, "rng", "python")
    assert not hasattr(python_rng, "entries")  # a sequence, not a mapping
    assert python_rng.items[0] == random.getstate()[0]


def test_snapshot_does_not_alias_live_tensors():  # P2
    model = LayerModel()
    extra = torch.tensor(5.0)
    snapshot = captured(model, extras={"tensor": extra}, capture_rng=False)
    before = lookup(snapshot.state, "model", "layer", "weight").to_tensor().clone()
    with torch.no_grad():
        model.layer.weight.add_(1.0)
        extra.add_(1.0)
    assert torch.equal(lookup(snapshot.state, "model", "layer", "weight").to_tensor(), before)
    assert lookup(snapshot.state, "extra", "tensor").to_tensor().item() == 5.0


def test_omitted_and_explicit_sections_differ():  # P3
    model = LayerModel()
    omitted = captured(model, capture_rng=False)
    explicit_none = captured(model, scheduler=None, capture_rng=False)
    difference = ExactComparison().compare(omitted, explicit_none).first_difference
    assert (difference.path, difference.reason) == ("scheduler", "missing_baseline")
    empty_extras = captured(model, extras={}, capture_rng=False)
    assert ExactComparison().compare(omitted, empty_extras).first_difference.path == "extra"


def test_unsupported_extra_abstains_and_failing_state_dict_errors():  # P4
    model = LayerModel()
    unsupported = capture_snapshot(model, extras={"bad": object()}, capture_rng=False)
    assert unsupported.outcome == Outcome.ABSTAIN
    assert unsupported.snapshot is None
    assert unsupported.issue.path == "extra.bad"
    broken = capture_snapshot(model, extras={"broken": BrokenStateDict()}, capture_rng=False)
    assert broken.outcome == Outcome.ERROR
    assert broken.issue.path == "$"
    assert "RuntimeError" in broken.issue.detail and "boom" in broken.issue.detail


def test_sparse_tensor_abstains():  # P5
    sparse = torch.sparse_coo_tensor([[0]], [1.0], (2,), check_invariants=True)
    result = capture_snapshot(LayerModel(), extras={"sparse": sparse}, capture_rng=False)
    assert result.outcome == Outcome.ABSTAIN
    assert result.issue.path == "extra.sparse"


def test_scheduler_and_scaler_sections():  # P6
    model = LayerModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1)
    snapshot = captured(
        model,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=StateDictOwner({"scale": 16.0}),
        capture_rng=False,
    )
    assert lookup(snapshot.state, "scheduler", "last_epoch") == 0
    assert lookup(snapshot.state, "scaler", "scale") == 16.0


class FixedBackend:
    name = "test_backend"

    def __init__(self, value: object) -> None:
        self.value = value

    def freeze(self, value: object, path: tuple = ()) -> object:
        return self.value


def test_custom_backend_names_the_snapshot():  # P7
    reference = captured(LayerModel(), capture_rng=False)
    snapshot = captured(LayerModel(), capture_rng=False, backend=FixedBackend(reference.state))
    assert snapshot.backend == "test_backend"
    assert snapshot.state == reference.state


def test_backend_returning_a_non_mapping_errors():  # P8
    result = capture_snapshot(LayerModel(), capture_rng=False, backend=FixedBackend(1))
    assert result.outcome == Outcome.ERROR
    assert result.snapshot is None


class CollidingNames(torch.nn.Module):
    """Reports a parameter `layer` and a parameter `layer.weight`: no tree holds both."""

    def __init__(self) -> None:
        super().__init__()
        self.first = torch.nn.Parameter(torch.ones(1))
        self.second = torch.nn.Parameter(torch.ones(1))

    def named_parameters(self, *args, **kwargs):
        yield "layer", self.first
        yield "layer.weight", self.second


def test_dotted_name_collision_abstains_at_the_root():
    result = capture_snapshot(CollidingNames(), capture_rng=False)
    assert result.outcome == Outcome.ABSTAIN
    assert result.issue.path == "$"


def test_capture_records_are_the_contract_types():
    result = capture_snapshot(LayerModel(), capture_rng=False)
    assert isinstance(result, CaptureResult)
    issue = CaptureIssue("extra", "detail")
    assert (issue.path, issue.detail) == ("extra", "detail")


# Optimizer canonicalisation (§4.4 of ANCHOR_CASES) ------------------------------------


def stepped(optimizer_factory):
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = optimizer_factory(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    return model, optimizer


def test_sgd_state_is_keyed_by_parameter_name():
    model, optimizer = stepped(lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
    state = captured(model, optimizer=optimizer, capture_rng=False).state
    assert keys_of(lookup(state, "optimizer", "state")) == ["bias", "weight"]
    assert keys_of(lookup(state, "optimizer", "state", "weight")) == ["momentum_buffer"]
    assert lookup(state, "optimizer", "param_groups", 0, "params").items == ("weight", "bias")
    assert str(id(model.weight)) not in repr(state)


def test_adam_state_paths():
    model, optimizer = stepped(lambda params: torch.optim.Adam(params, lr=0.01))
    weight_state = lookup(
        captured(model, optimizer=optimizer, capture_rng=False).state,
        "optimizer",
        "state",
        "weight",
    )
    assert keys_of(weight_state) == ["exp_avg", "exp_avg_sq", "step"]


def test_group_order_is_observable():
    def snapshot_with(first_lr: float, second_lr: float):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Linear(1, 1))
        optimizer = torch.optim.SGD(
            [
                {"params": model[0].parameters(), "lr": first_lr},
                {"params": model[1].parameters(), "lr": second_lr},
            ]
        )
        return captured(model, optimizer=optimizer, capture_rng=False)

    result = ExactComparison().compare(snapshot_with(0.1, 0.2), snapshot_with(0.2, 0.1))
    assert result.first_difference.path == "optimizer.param_groups[0].lr"
    paths = [
        difference.path
        for difference in ExactComparison().compare_all(
            snapshot_with(0.1, 0.2), snapshot_with(0.1, 0.2)
        )
    ]
    assert paths == []


class AliasedModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(1))
        self.alias = self.weight


def test_aliased_parameter_abstains():
    model = AliasedModel()
    result = capture_snapshot(
        model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), capture_rng=False
    )
    assert result.outcome == Outcome.ABSTAIN
    assert "aliases" in result.issue.detail
    assert "('weight', 'alias')" in result.issue.detail
    assert result.issue.path == "optimizer.param_groups[0].params[0]"


def test_foreign_parameter_abstains():
    model = torch.nn.Linear(1, 1)
    foreign = torch.nn.Parameter(torch.ones(1))
    result = capture_snapshot(
        model, optimizer=torch.optim.SGD([foreign], lr=0.1), capture_rng=False
    )
    assert result.outcome == Outcome.ABSTAIN
    assert "no model name" in result.issue.detail


def test_parameter_listed_twice_abstains():
    model = torch.nn.Linear(1, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    optimizer.param_groups[0]["params"].append(model.weight)
    result = capture_snapshot(model, optimizer=optimizer, capture_rng=False)
    assert result.outcome == Outcome.ABSTAIN
    assert "more than once" in result.issue.detail
    assert result.issue.path == "optimizer.param_groups[0].params[1]"


def test_mapping_error_text_names_detail_and_path():
    model = torch.nn.Linear(1, 1)
    result = capture_snapshot(
        model,
        optimizer=torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1),
        capture_rng=False,
    )
    assert (
        result.issue.detail == "parameter has no model name at optimizer.param_groups[0].params[0]"
    )


def test_parameters_without_state_get_an_empty_mapping():
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = captured(model, optimizer=optimizer, capture_rng=False).state
    assert keys_of(lookup(state, "optimizer", "state", "weight")) == []
    assert keys_of(lookup(state, "optimizer", "state")) == ["bias", "weight"]
