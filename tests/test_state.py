"""Freezing observed state: copies, metadata, unsupported values, paths, dotted names."""

from __future__ import annotations

import warnings

import pytest
import torch
from trainparity._internal.state.freeze import (
    AmbiguousStateNameError,
    FrozenMapping,
    FrozenSequence,
    FrozenTensor,
    UnsupportedStateError,
    freeze,
    nested_named_values,
)
from trainparity._internal.state.paths import render_path


def test_render_path_rules():
    assert render_path(()) == "$"
    assert render_path(("model", "layer", 2, "weight")) == "model.layer[2].weight"
    assert render_path(("extra", "a.b", "not valid")) == 'extra["a.b"]["not valid"]'
    assert render_path(("model", "0", "weight")) == 'model["0"].weight'
    assert render_path(("optimizer", "state", "0", "exp_avg")) == 'optimizer.state["0"].exp_avg'
    assert render_path(("x", "é")) == "x.é"
    assert render_path(("x", "a-é")) == 'x["a-é"]'


def test_mapping_keys_sorted_and_sequence_kinds_kept():
    frozen = freeze({"z": (1, 2), "a": [3]})
    assert isinstance(frozen, FrozenMapping)
    assert frozen.keys() == ["a", "z"]
    assert frozen.as_dict()["a"].kind == "list"
    assert frozen.as_dict()["z"].kind == "tuple"


def test_frozen_tensor_is_a_private_copy_and_keeps_signed_zero_and_grad_flag():
    source = torch.tensor([1.0, -0.0], requires_grad=True)
    frozen = FrozenTensor.capture(source)
    with torch.no_grad():
        source.add_(5)
    restored = frozen.to_tensor()
    assert restored.tolist() == [1.0, -0.0]
    assert torch.signbit(restored[1])
    assert frozen.requires_grad is True
    restored.add_(1)
    assert frozen.to_tensor().tolist() == [1.0, -0.0]


@pytest.mark.parametrize(
    "tensor",
    [
        torch.tensor([1, -2], dtype=torch.int64),
        torch.tensor([True, False]),
        torch.tensor([1 + 2j, -3 + 0j], dtype=torch.complex64),
        torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
        torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        torch.tensor(3.0),
    ],
)
def test_raw_bytes_are_a_contiguous_clone_and_round_trip(tensor):
    frozen = FrozenTensor.capture(tensor)
    expected = tensor.detach().contiguous().clone()
    assert bytes(frozen.data) == bytes(expected.reshape(-1).view(torch.uint8).tolist())
    assert torch.equal(frozen.to_tensor(), expected)
    assert frozen.shape == tuple(tensor.shape)
    assert frozen.dtype == str(tensor.dtype)


def test_views_that_share_storage_are_frozen_independently():
    base = torch.arange(6, dtype=torch.float32)
    frozen = freeze({"whole": base, "tail": base[3:], "strided": base[::2]})
    entries = frozen.as_dict()
    base.zero_()
    assert entries["tail"].to_tensor().tolist() == [3.0, 4.0, 5.0]
    assert entries["strided"].to_tensor().tolist() == [0.0, 2.0, 4.0]
    assert entries["whole"].to_tensor().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_empty_tensor_has_empty_bytes_and_keeps_shape():
    frozen = FrozenTensor.capture(torch.empty((0, 2), dtype=torch.int64))
    assert bytes(frozen.data) == b""
    restored = frozen.to_tensor()
    assert restored.shape == (0, 2) and restored.dtype == torch.int64


def test_unknown_dtype_text_is_rejected():
    frozen = FrozenTensor((1,), "torch.unknown", "cpu", False, b"\0")
    with pytest.raises(TypeError, match="unknown captured dtype"):
        frozen.to_tensor()


def _quantized() -> torch.Tensor:
    """A quantized tensor, whose creation torch warns is deprecated (not what is tested)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ({"bad": object()}, "bad"),
        ({(1, 2): "a tuple key"}, "$"),
        ({"nan": {float("nan"): 1}}, "nan"),
        ({"sparse": torch.eye(2).to_sparse()}, "sparse"),
        ({"meta": torch.empty(2, device="meta")}, "meta"),
        ({"q": _quantized()}, "q"),
        ({"s": {1, 2}}, "s"),
        ({"c": 1 + 2j}, "c"),
    ],
)
def test_unsupported_values_name_their_path(value, where):
    with pytest.raises(UnsupportedStateError, match="unsupported state") as caught:
        freeze(value)
    assert render_path(caught.value.path) == where


def test_cyclic_structures_are_unsupported():
    cycle: dict = {"a": []}
    cycle["a"].append(cycle)
    with pytest.raises(UnsupportedStateError, match="cyclic") as caught:
        freeze(cycle)
    assert render_path(caught.value.path) == "a[0]"


def test_shared_non_cyclic_references_are_fine():
    shared = [1, 2]
    frozen = freeze({"a": shared, "b": shared})
    assert frozen.as_dict()["a"] == frozen.as_dict()["b"] == FrozenSequence("list", (1, 2))


def test_scalars_keep_type_and_distinct_states_stay_distinct():
    frozen = freeze({"t": True, "one": 1, "f": 1.0, "none": None, "empty": [], "b": b"x"})
    entries = frozen.as_dict()
    assert entries["t"] is True
    assert type(entries["one"]) is int and type(entries["f"]) is float
    assert entries["none"] is None and entries["empty"] == FrozenSequence("list", ())


def test_dotted_names_expand_and_ambiguity_is_rejected():
    assert nested_named_values({"layer.weight": 1}) == {"layer": {"weight": 1}}
    with pytest.raises(AmbiguousStateNameError):
        nested_named_values({"layer": 1, "layer.weight": 2})
