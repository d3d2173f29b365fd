"""compare_states and assert_parity on real model, optimizer and scheduler states."""

from __future__ import annotations

import math

import pytest
import torch
from trainparity import ExactComparison, Outcome, ToleranceComparison, compare_states
from trainparity.testing import assert_parity


def _trained_state(seed: int, steps: int = 2, perturb: float = 0.0) -> dict:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        scheduler.step()
    if perturb:
        with torch.no_grad():
            model[2].weight[0, 1] += perturb
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def test_equal_training_states_pass_with_statistics_for_every_tensor():
    result = compare_states(_trained_state(0), _trained_state(0))
    assert result.outcome is Outcome.PASS and result.equal
    assert result.first_difference is None and result.differences == ()
    paths = [stats.path for stats in result.tensors]
    assert 'model["0.weight"]' in paths
    assert 'optimizer.state["0"].exp_avg' in paths
    assert all(stats.mismatch_count == 0 for stats in result.tensors)


def test_perturbed_weight_is_the_first_difference_with_statistics():
    result = compare_states(_trained_state(0), _trained_state(0, perturb=0.5))
    assert result.outcome is Outcome.FAIL
    assert result.first_difference.path == 'model["2.weight"]'
    assert result.first_difference.reason == "tensor_value"
    stats = next(s for s in result.tensors if s.path == 'model["2.weight"]')
    assert stats.mismatch_count == 1 and stats.numel == 3
    assert stats.first_mismatch_index == 1
    assert stats.max_abs_error == pytest.approx(0.5, rel=1e-6)
    assert result.worst_tensors()[0].path == 'model["2.weight"]'


def test_scheduler_and_optimizer_scalars_are_compared():
    baseline = _trained_state(0, steps=2)
    candidate = _trained_state(0, steps=2)
    candidate["scheduler"]["last_epoch"] = 1
    candidate["optimizer"]["param_groups"][0]["lr"] = 0.5
    paths = [d.path for d in compare_states(baseline, candidate).differences]
    assert paths == ["optimizer.param_groups[0].lr", "scheduler.last_epoch"]


def test_tolerance_policy_and_invalid_policy():
    baseline = {"w": torch.tensor([1.0, 2.0])}
    candidate = {"w": torch.tensor([1.0, 2.0 + 1e-6])}
    assert compare_states(baseline, candidate).outcome is Outcome.FAIL
    assert (
        compare_states(baseline, candidate, ToleranceComparison(rtol=1e-5, atol=0)).outcome
        is Outcome.PASS
    )
    assert compare_states(baseline, baseline, ExactComparison()).policy == "exact"
    with pytest.raises(TypeError, match="explicit ExactComparison or ToleranceComparison"):
        compare_states(baseline, candidate, "exact")


def test_non_contiguous_and_differently_strided_tensors_compare_by_value():
    base = torch.arange(12.0).reshape(3, 4)
    assert compare_states({"x": base.t()}, {"x": base.t().contiguous()}).outcome is Outcome.PASS


def test_assert_parity_passes_silently_and_fails_with_a_precise_message():
    assert_parity(_trained_state(1), _trained_state(1))
    baseline = {"layer": {"weight": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])}, "step": 3}
    candidate = {"layer": {"weight": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.5, 6.0]])}, "step": 4}
    with pytest.raises(AssertionError) as caught:
        assert_parity(baseline, candidate)
    message = str(caught.value)
    assert "layer.weight" in message
    assert "Mismatched elements: 1 / 6 (16.7%)" in message
    assert "index (1, 1) (flat 4): baseline 5.0, candidate 5.5" in message
    assert "Greatest absolute difference: 0.5" in message
    assert "Greatest relative difference: 0.1" in message
    assert "1 more differing path(s): step (value)" in message


def test_assert_parity_with_tolerance_and_scalar_difference():
    assert_parity({"w": torch.tensor([1.0])}, {"w": torch.tensor([1.0 + 1e-7])}, rtol=1e-5, atol=0)
    with pytest.raises(AssertionError, match=r"States differ at lr \(value\)"):
        assert_parity({"lr": 0.1}, {"lr": 0.2}, rtol=1e-3, atol=0)
    with pytest.raises(ValueError, match="together"):
        assert_parity({}, {}, rtol=1e-3)
    with pytest.raises(ValueError, match="not both"):
        assert_parity({}, {}, rtol=1e-3, atol=0, comparison=ExactComparison())


def test_assert_parity_reports_nan_positions():
    with pytest.raises(AssertionError, match="baseline nan, candidate 1.0"):
        assert_parity({"w": torch.tensor([math.nan])}, {"w": torch.tensor([1.0])})


def test_cyclic_states_are_unsupported_not_a_recursion_error():
    from trainparity._internal.state.freeze import UnsupportedStateError

    cycle: dict = {"a": [torch.ones(2)]}
    cycle["a"].append(cycle)
    with pytest.raises(UnsupportedStateError, match="cyclic") as caught:
        compare_states({"x": cycle}, {"x": {"a": []}})
    assert caught.value.path == ("x", "a", 1)
    shared = [torch.ones(2)]  # the same container twice is not a cycle
    assert compare_states({"p": shared, "q": shared}, {"p": shared, "q": shared}).equal
