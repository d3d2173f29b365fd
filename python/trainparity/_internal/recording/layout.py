"""A recorded state split into what rarely changes (the layout) and what changes every step.

The layout is the snapshot manifest's tagged tree (tree_codec.encode_tree)
with every scalar leaf replaced by `["v"]`, plus the tensor table (name,
dtype, shape, device, requires_grad): written once and referenced by the
steps while it stays the same. A step stores the scalars, in tree order, as a
JSON list of the same tagged nodes, and one fixed-size record per tensor.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from trainparity._internal.state.file_ranges import FileRange
from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenTensor,
    UnsupportedStateError,
    freeze,
)
from trainparity._internal.state.normalize import normalize_observation
from trainparity._internal.state.tree_codec import decode_tree, encode_tree, placement_entry

if TYPE_CHECKING:
    import torch

_SCALAR_TAGS = frozenset("n?ifsb")
_SLOT = ["v"]


def split_state(
    state: Mapping[str, object],
    *,
    locate: Callable[[torch.Tensor], FileRange | None] | None = None,
) -> tuple[str, str, list[FrozenTensor]]:
    """(layout JSON, scalars JSON, tensors in table order) of one observation.

    Normalised and frozen as `observe_checkpoint` results are (numpy values
    to Python, keys to str), without copying tensor values. `locate`: see
    freeze (the file ranges tensors are mapped from, kept as their `source`).
    """
    normalized = normalize_observation(state)
    if not isinstance(normalized, dict):
        raise UnsupportedStateError(
            (), f"recorded state is a {type(state).__name__}, not a mapping"
        )
    frozen = freeze(normalized, copy=False, locate=locate)
    tree, named = encode_tree(frozen)
    scalars: list[Any] = []
    skeleton = _hollowed(tree, scalars)
    table = [
        {
            "name": name,
            "dtype": tensor.dtype,
            "shape": list(tensor.shape),
            "device": tensor.device,
            "requires_grad": tensor.requires_grad,
            **placement_entry(tensor),
        }
        for name, tensor in named
    ]
    layout = json.dumps({"tree": skeleton, "tensors": table}, sort_keys=True, separators=(",", ":"))
    return layout, json.dumps(scalars, separators=(",", ":")), [tensor for _, tensor in named]


def join_state(layout: dict, scalars: list, tensors: list[FrozenTensor]) -> FrozenMapping:
    """Inverse of split_state: the frozen tree of one recorded step."""
    remaining = iter(scalars)
    tree = _filled(layout["tree"], remaining)
    if next(remaining, None) is not None:
        raise ValueError("the step holds more scalars than its layout has places for")
    state = decode_tree(tree, tensors)
    if not isinstance(state, FrozenMapping):
        raise ValueError("recorded state is not a mapping")
    return state


def _hollowed(node: list, scalars: list) -> Any:
    """Replace scalar leaves by slots, collecting them in pre-order."""
    tag = node[0]
    if tag in _SCALAR_TAGS:
        scalars.append(node)
        return _SLOT
    if tag == "t":
        return node
    if tag == "m":
        return ["m", [[key, _hollowed(item, scalars)] for key, item in node[1]]]
    return [tag, [_hollowed(item, scalars) for item in node[1]]]


def _filled(node: list, scalars: Any) -> Any:
    tag = node[0]
    if tag == "v":
        value = next(scalars, None)
        if value is None:
            raise ValueError("the step holds fewer scalars than its layout has places for")
        return value
    if tag == "t":
        return node
    if tag == "m":
        return ["m", [[key, _filled(item, scalars)] for key, item in node[1]]]
    return [tag, [_filled(item, scalars) for item in node[1]]]
