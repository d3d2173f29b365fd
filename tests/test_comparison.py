"""Comparison policies and traversal: the anchor cases C1-C13 and path/summary rules."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from trainparity import ExactComparison, Outcome, ToleranceComparison
from trainparity._internal.state.freeze import FrozenSequence, FrozenTensor

from tests.helpers import extra_pair, snapshot_of


def test_c1_identical_nested_state_passes():
    state = {"nested": {"items": [1, None, ("x", 0.0)]}}
    result = ExactComparison().compare(snapshot_of(state), snapshot_of(state))
    assert result.outcome is Outcome.PASS
    assert result.first_difference is None
    assert result.message == "snapshots are equivalent under policy"


@pytest.mark.parametrize(
    ("left", "right", "reason"),
    [
        ({"a": 1}, {}, "missing_candidate"),
        ({}, {"a": 1}, "missing_baseline"),
        (None, 0, "type"),
        ([], [0], "sequence_length"),
        ([], (), "sequence_kind"),
        (True, 1, "type"),
    ],
)
def test_c2_structural_reasons(left, right, reason):
    result = ExactComparison().compare(*extra_pair(left, right))
    assert result.outcome is Outcome.FAIL
    difference = result.first_difference
    assert difference.reason == reason
    assert difference.path.startswith("extra")
    assert difference.baseline != difference.candidate
    assert "first observed divergence" in result.message
    assert "root cause" not in result.message


def test_c2_summaries_and_missing_marker():
    difference = ExactComparison().compare(*extra_pair({"a": 1}, {})).first_difference
    assert (difference.path, difference.baseline, difference.candidate) == (
        "extra.a",
        "1",
        "<missing>",
    )
    difference = ExactComparison().compare(*extra_pair([], [0])).first_difference
    assert (difference.baseline, difference.candidate) == ("0", "1")
    difference = ExactComparison().compare(*extra_pair([], ())).first_difference
    assert (difference.baseline, difference.candidate) == ("'list'", "'tuple'")


def test_c3_sorted_union_of_keys():
    difference = ExactComparison().compare(*extra_pair({"a": 1}, {"b": 1})).first_difference
    assert (difference.path, difference.reason) == ("extra.a", "missing_candidate")


@pytest.mark.parametrize(
    ("left", "right", "reason"),
    [
        (torch.ones(2), torch.ones(3), "tensor_shape"),
        (torch.ones(2), torch.ones(2, dtype=torch.float64), "tensor_dtype"),
        (torch.tensor([1.0]), torch.tensor([2.0]), "tensor_value"),
    ],
)
def test_c4_tensor_reasons(left, right, reason):
    difference = ExactComparison().compare(*extra_pair(left, right)).first_difference
    assert (difference.path, difference.reason) == ("extra", reason)


def test_c4_metadata_summaries_are_attribute_reprs():
    shape = ExactComparison().compare(*extra_pair(torch.ones(2), torch.ones(3))).first_difference
    assert (shape.baseline, shape.candidate) == ("(2,)", "(3,)")
    dtype = ExactComparison().compare(
        *extra_pair(torch.ones(2), torch.ones(2, dtype=torch.float64))
    )
    assert (dtype.first_difference.baseline, dtype.first_difference.candidate) == (
        "'torch.float32'",
        "'torch.float64'",
    )
    assert shape.max_abs_error is None and shape.max_rel_error is None


def _with(frozen: FrozenTensor, **changes) -> FrozenTensor:
    fields = dict(
        shape=frozen.shape,
        dtype=frozen.dtype,
        device=frozen.device,
        requires_grad=frozen.requires_grad,
        data=frozen.data,
    )
    fields.update(changes)
    return FrozenTensor(**fields)


def test_c5_device_and_requires_grad():
    frozen = FrozenTensor.capture(torch.tensor([1.0]))
    device = ExactComparison().compare(frozen, _with(frozen, device="cuda:0"))
    assert device.first_difference.reason == "tensor_device"
    assert (device.first_difference.baseline, device.first_difference.candidate) == (
        "'cpu'",
        "'cuda:0'",
    )
    grad = ExactComparison().compare(frozen, _with(frozen, requires_grad=True))
    assert grad.first_difference.reason == "tensor_requires_grad"
    assert (grad.first_difference.baseline, grad.first_difference.candidate) == ("False", "True")


def test_c6_signed_zero():
    assert ExactComparison().compare(*extra_pair(0.0, -0.0)).first_difference.reason == "value"
    tolerance = ToleranceComparison(rtol=0, atol=0)
    assert tolerance.compare(*extra_pair(0.0, -0.0)).outcome is Outcome.PASS


def _nan_with_payload(bits: int) -> float:
    return struct.unpack(">d", bits.to_bytes(8, "big"))[0]


def test_c7_nan_and_infinity():
    exact = ExactComparison()
    assert exact.compare(*extra_pair(math.nan, math.nan)).outcome is Outcome.PASS
    other_nan = _nan_with_payload(0x7FF8000000000001)
    assert exact.compare(*extra_pair(math.nan, other_nan)).first_difference.reason == "value"
    assert exact.compare(*extra_pair(math.inf, -math.inf)).first_difference.reason == "value"
    equal_nan = ToleranceComparison(rtol=0, atol=0, equal_nan=True)
    assert equal_nan.compare(*extra_pair(math.nan, math.nan)).outcome is Outcome.PASS
    strict = ToleranceComparison(rtol=0, atol=0, equal_nan=False)
    assert strict.compare(*extra_pair(math.nan, math.nan)).outcome is Outcome.FAIL


def test_c8_tensor_tolerance_with_nan_inf_and_empty():
    left = {"x": torch.tensor([math.nan, math.inf, 1.0]), "empty": torch.empty(0)}
    right = {"x": torch.tensor([math.nan, math.inf, 1.00001]), "empty": torch.empty(0)}
    assert ExactComparison().compare(*extra_pair(left, right)).outcome is Outcome.FAIL
    strict = ToleranceComparison(rtol=0, atol=0, equal_nan=False)
    assert strict.compare(*extra_pair(left, right)).outcome is Outcome.FAIL
    loose = ToleranceComparison(rtol=1e-4, atol=0, equal_nan=True)
    assert loose.compare(*extra_pair(left, right)).outcome is Outcome.PASS


def test_c9_error_magnitudes():
    policy = ToleranceComparison(rtol=1e-4, atol=1e-6)
    pair = extra_pair(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 3.0]))
    difference = policy.compare(*pair).first_difference
    assert difference.reason == "tensor_value"
    assert difference.max_abs_error == 1.0
    assert difference.max_rel_error == 0.5


def test_c10_exact_float_mismatch_carries_magnitudes():
    pair = (
        snapshot_of({"x": torch.tensor([1.0, 2.0])}),
        snapshot_of({"x": torch.tensor([1.0, 2.000001])}),
    )
    difference = ExactComparison().compare(*pair).first_difference
    assert (difference.path, difference.reason) == ("x", "tensor_value")
    assert difference.max_abs_error is not None and difference.max_abs_error > 0
    assert difference.max_rel_error is not None and difference.max_rel_error > 0


def test_c11_integers_stay_exact_under_tolerance_and_carry_magnitudes():
    policy = ToleranceComparison(rtol=1.0, atol=10.0)
    difference = policy.compare(*extra_pair(torch.tensor([1]), torch.tensor([2]))).first_difference
    assert difference.reason == "tensor_value"
    assert difference.max_abs_error == 1.0
    exact = ExactComparison().compare(*extra_pair(torch.tensor([1]), torch.tensor([2])))
    assert exact.first_difference.max_abs_error is None


@pytest.mark.parametrize(("rtol", "atol"), [(-1, 0), (0, -1), (math.inf, 0), (math.nan, 0)])
def test_c12_invalid_tolerances(rtol, atol):
    with pytest.raises(ValueError, match="finite and non-negative"):
        ToleranceComparison(rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"schema_version": 2}, "schema_version"),
        ({"backend": "other"}, "backend"),
        ({"step": 2}, "step"),
    ],
)
def test_c13_snapshot_metadata_comes_first(fields, path):
    baseline = snapshot_of({"x": 1})
    candidate = snapshot_of({"x": 2}, **{"step": 0, **fields})
    difference = ExactComparison().compare(baseline, candidate).first_difference
    assert (difference.path, difference.reason) == (path, path)


def test_tensor_summary_uses_full_double_repr_of_first_four_values():
    pair = extra_pair(torch.tensor(2.692511796951294), torch.tensor(1.0))
    difference = ExactComparison().compare(*pair).first_difference
    assert (
        difference.baseline
        == "tensor(shape=(), dtype=torch.float32, device=cpu, values=[2.692511796951294])"
    )
    long_pair = extra_pair(torch.arange(6), torch.arange(1, 7))
    assert "values=[0, 1, 2, 3])" in ExactComparison().compare(*long_pair).first_difference.baseline


def test_mapping_and_sequence_summaries():
    difference = ExactComparison().compare(*extra_pair({"a": 1, "b": 2}, [1])).first_difference
    assert difference.baseline == "mapping(keys=['a', 'b'])"
    assert difference.candidate == "list(length=1)"


def test_compare_all_returns_every_difference_in_traversal_order():
    left = {"b": [1, 2], "a": {"z": 1.0, "y": torch.tensor([1.0])}, "c": "x"}
    right = {"b": [1, 3], "a": {"z": 2.0, "y": torch.tensor([2.0])}, "c": "x", "d": None}
    differences = ExactComparison().compare_all(snapshot_of(left), snapshot_of(right))
    assert [d.path for d in differences] == ["a.y", "a.z", "b[1]", "d"]
    assert [d.reason for d in differences] == ["tensor_value", "value", "value", "missing_baseline"]


def test_exact_tensor_bits_signed_zero_and_nan_payloads():
    zero = extra_pair(torch.tensor([0.0]), torch.tensor([-0.0]))
    assert ExactComparison().compare(*zero).outcome is Outcome.FAIL
    assert ToleranceComparison(rtol=0, atol=0).compare(*zero).outcome is Outcome.PASS
    quiet = torch.tensor([math.nan])
    payload = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32)
    assert ExactComparison().compare(*extra_pair(quiet, quiet.clone())).outcome is Outcome.PASS
    assert ExactComparison().compare(*extra_pair(quiet, payload)).outcome is Outcome.FAIL


def _nested(depth: int, innermost: tuple) -> FrozenSequence:
    node = FrozenSequence("list", innermost)
    for _ in range(depth):
        node = FrozenSequence("list", (node,))
    return node


def test_deep_trees_do_not_hit_the_recursion_limit():
    differences = ExactComparison().compare_all(_nested(5000, ()), _nested(5000, (1,)))
    assert [d.reason for d in differences] == ["sequence_length"]
    assert differences[0].path.count("[0]") == 5000
