"""The frozen-tree codec: a frozen state tree as tagged compact JSON, and back.

A snapshot manifest stores its `tree` this way and a recording its layout
(recording/layout.py), so both file formats share one encoding, one decoder
that checks untrusted input, and the tensor table's `placement` key.
SnapshotFileError is defined here, below both formats, because that decoder
raises it.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Sequence
from typing import Any

from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenSequence,
    FrozenTensor,
    FrozenValue,
    UnsupportedStateError,
    mapping_key_order,
)
from trainparity._internal.state.paths import StatePath, render_path
from trainparity._internal.state.placement import ShardPlacement

__all__ = [
    "SnapshotFileError",
    "decode_tree",
    "encode_tree",
    "placement_entry",
    "placement_of_entry",
]


class SnapshotFileError(ValueError):
    """A snapshot file that is truncated, corrupt or not a trainparity snapshot."""


def encode_tree(value: FrozenValue) -> tuple[Any, list[tuple[str, FrozenTensor]]]:
    """(tagged JSON tree, tensors) of a frozen value: the manifest's `tree` and its tensor table.

    Every node is a JSON list whose first item is a one-letter tag, so values
    of every supported type survive JSON unchanged (int beyond 2**53, NaN,
    -0.0, bytes, tuple vs list):

    - `["n"]` None, `["?", bool]`, `["i", "decimal digits"]`,
      `["f", "16 hex digits of the big-endian IEEE float64"]`, `["s", str]`,
      `["b", "base64"]`;
    - `["t", index]` a tensor: index into the returned tensor list, whose
      items are `(rendered state path, tensor)` in tree order;
    - `["m", [[key, node], ...]]` a mapping whose keys are all str (sorted,
      as frozen); `["k", [[key node, node], ...]]` a mapping with another
      scalar key (an int milestone), each key a tagged scalar node, in
      `mapping_key_order` (written only then, so files of str-keyed state
      are unchanged and older files read as before);
      `["l", [node, ...]]` a list; `["u", [node, ...]]` a tuple.

    Raises UnsupportedStateError (naming its path) for a value that is not frozen state.
    """
    tensors: list[tuple[str, FrozenTensor]] = []
    return _encode_node(value, (), tensors), tensors


def _encode_node(
    value: FrozenValue, path: StatePath, tensors: list[tuple[str, FrozenTensor]]
) -> Any:
    if value is None:
        return ["n"]
    if isinstance(value, bool):
        return ["?", value]
    if isinstance(value, int):
        return ["i", str(int(value))]
    if isinstance(value, float):
        return ["f", struct.pack(">d", value).hex()]
    if isinstance(value, str):
        return ["s", str(value)]
    if isinstance(value, bytes):
        return ["b", base64.b64encode(value).decode("ascii")]
    if isinstance(value, FrozenTensor):
        tensors.append((render_path(path), value))
        return ["t", len(tensors) - 1]
    if isinstance(value, FrozenMapping):
        if all(isinstance(key, str) for key, _ in value.entries):
            return [
                "m",
                [[key, _encode_node(item, (*path, key), tensors)] for key, item in value.entries],
            ]
        return [
            "k",
            [
                [_encode_node(key, path, tensors), _encode_node(item, (*path, key), tensors)]
                for key, item in value.entries
            ],
        ]
    if isinstance(value, FrozenSequence):
        tag = "l" if value.kind == "list" else "u"
        return [
            tag,
            [_encode_node(item, (*path, index), tensors) for index, item in enumerate(value.items)],
        ]
    raise UnsupportedStateError(path, f"{type(value).__module__}.{type(value).__qualname__}")


def placement_entry(tensor: FrozenTensor) -> dict[str, Any]:
    """The tensor table's `placement` key, only for a shard (a plain tensor's entry needs none)."""
    return {} if tensor.placement is None else {"placement": tensor.placement.as_json()}


def placement_of_entry(entry: dict) -> ShardPlacement | None:
    """The shard placement a tensor table entry records; SnapshotFileError when malformed."""
    if "placement" not in entry:
        return None
    try:
        return ShardPlacement.from_json(entry["placement"])
    except ValueError as error:
        raise SnapshotFileError(f"tensor {entry.get('name')!r}: {error}") from None


def decode_tree(tree: Any, tensors: Sequence[FrozenTensor]) -> FrozenValue:
    """Inverse of encode_tree: the frozen value of a tagged tree, `["t", i]` resolved to `tensors[i]`.

    The tree may come from an untrusted file. A wrong tag, a value of the
    wrong JSON type, a negative tensor reference or unsorted mapping keys
    raise SnapshotFileError; a node of the wrong shape raises the lookup
    error it meets (IndexError, KeyError, TypeError, ValueError,
    struct.error, RecursionError for a tree nested too deep), which a reader
    of a file reports as that file being malformed.
    """
    return _decode_node(tree, tensors)


def _decode_node(node: Any, tensors: Sequence[FrozenTensor]) -> FrozenValue:
    tag = node[0]
    if tag == "n":
        return None
    if tag == "?":
        return _checked(node[1], bool)
    if tag == "i":
        return int(_checked(node[1], str))
    if tag == "f":
        return struct.unpack(">d", bytes.fromhex(_checked(node[1], str)))[0]
    if tag == "s":
        return _checked(node[1], str)
    if tag == "b":
        return base64.b64decode(_checked(node[1], str), validate=True)
    if tag == "t":
        index = _checked(node[1], int)
        if index < 0:  # Python would count from the end and alias another tensor
            raise SnapshotFileError(f"tensor reference {index} in the manifest is negative")
        return tensors[index]
    if tag == "m":
        entries = tuple((_checked(key, str), _decode_node(item, tensors)) for key, item in node[1])
        keys = [key for key, _ in entries]
        if any(keys[index] >= keys[index + 1] for index in range(len(keys) - 1)):
            # The comparison merges both sides' keys in order; unsorted keys would mis-pair them.
            raise SnapshotFileError("mapping keys in the manifest are not sorted and unique")
        return FrozenMapping(entries)
    if tag == "k":
        entries = tuple((_decoded_key(key), _decode_node(item, tensors)) for key, item in node[1])
        order = [mapping_key_order(key) for key, _ in entries]
        if any(order[index] >= order[index + 1] for index in range(len(order) - 1)):
            raise SnapshotFileError("mapping keys in the manifest are not sorted and unique")
        return FrozenMapping(entries)
    if tag in ("l", "u"):
        items = tuple(_decode_node(item, tensors) for item in node[1])
        return FrozenSequence("list" if tag == "l" else "tuple", items)
    raise SnapshotFileError(f"unknown node kind {tag!r} in the manifest")


def _decoded_key(node: Any) -> Any:
    """A mapping key's tagged node decoded: a plain scalar, never a tensor or container."""
    if node[0] not in ("n", "?", "i", "f", "s", "b"):
        raise SnapshotFileError(f"mapping key of kind {node[0]!r} in the manifest")
    key = _decode_node(node, ())
    if isinstance(key, float) and key != key:
        raise SnapshotFileError("mapping key nan in the manifest")
    return key


def _checked(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SnapshotFileError(
            f"expected {kind.__name__} in the manifest, found {type(value).__name__}"
        )
    return value
