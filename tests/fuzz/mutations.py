"""Hypothesis strategies that damage files: byte edits, and edits of a JSON document's tree."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

# ------------------------------------------------------------------ byte-level edits

_POSITIONS = st.integers(0, 1 << 20)  # taken modulo the file length
_SMALL_BYTES = st.binary(min_size=1, max_size=16)
_JUNK = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([b"\x00" * 4096, b"{}", b'{"a":1}', b"\xff\xfe", b"\x93NUMPY"]),
)


def _at(data: bytes, position: int) -> int:
    return position % (len(data) + 1)


def _flip(data: bytes, position: int, bit: int) -> bytes:
    if not data:
        return data
    index = position % len(data)
    return data[:index] + bytes([data[index] ^ (1 << bit)]) + data[index + 1 :]


def _overwrite(data: bytes, position: int, patch: bytes) -> bytes:
    index = _at(data, position)
    return data[:index] + patch + data[index + len(patch) :]


def _delete(data: bytes, position: int, length: int) -> bytes:
    index = _at(data, position)
    return data[:index] + data[index + length :]


def _length_prefix(data: bytes, value: int, relative: bool) -> bytes:
    """Rewrite the 8-byte little-endian length that opens a snapshot file."""
    if len(data) < 8:
        return data
    current = struct.unpack_from("<Q", data)[0]
    value = (current + value) % (1 << 64) if relative else value
    return struct.pack("<Q", value) + data[8:]


BYTE_EDIT: st.SearchStrategy[Callable[[bytes], bytes]] = st.one_of(
    st.builds(lambda p, b: lambda d: _flip(d, p, b), _POSITIONS, st.integers(0, 7)),
    st.builds(lambda p, x: lambda d: _overwrite(d, p, x), _POSITIONS, _SMALL_BYTES),
    st.builds(lambda p: lambda d: d[: _at(d, p)], _POSITIONS),  # truncation
    st.builds(lambda x: lambda d: d + x, _JUNK),  # trailing junk
    st.builds(lambda p, x: lambda d: d[: _at(d, p)] + x + d[_at(d, p) :], _POSITIONS, _JUNK),
    st.builds(lambda p, n: lambda d: _delete(d, p, n), _POSITIONS, st.integers(1, 64)),
    st.builds(lambda v: lambda d: _length_prefix(d, v, True), st.integers(-64, 64)),
    st.builds(
        lambda v: lambda d: _length_prefix(d, v, False),
        st.one_of(
            st.integers(0, (1 << 64) - 1), st.sampled_from([0, 1, 7, 1 << 63, (1 << 64) - 1])
        ),
    ),
)
BYTE_EDITS = st.lists(BYTE_EDIT, min_size=1, max_size=3)


def apply_edits(data: bytes, edits: list[Callable[[bytes], bytes]]) -> bytes:
    for edit in edits:
        data = edit(data)
    return data


# ------------------------------------------------------------------ JSON tree edits

_HUGE_INTS = st.sampled_from(
    [-1, -(2**63), 2**63 - 1, 2**63, 2**64, 2**64 + 8, 10**30, -(10**30), 10**400]
)
_ODD_TEXT = st.sampled_from(
    [
        "",
        "torch.float128",
        "torch.float32",
        "torch.complex32",
        "torch.bool",
        "F32",
        "U8",
        "cpu",
        "cuda:0",
        "\x00",
        "\udcff",  # a lone surrogate: not encodable as UTF-8
        "a\nPASS: forged",
        "00" * 15,
        "zz" * 16,
        "l",
        "m",
        "t",
        "trainparity-snapshot/1",
    ]
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    _HUGE_INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    _ODD_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def json_paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (sequence of keys/indices) into a JSON tree, the root `()` included."""
    paths = [prefix]
    if isinstance(node, dict):
        for key, item in node.items():
            paths.extend(json_paths(item, (*prefix, key)))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            paths.extend(json_paths(item, (*prefix, index)))
    return paths


def _parent(document: Any, path: tuple) -> Any:
    for step in path[:-1]:
        document = document[step]
    return document


def replaced(document: Any, path: tuple, value: Any) -> Any:
    """`document` with the node at `path` replaced (the root when `path` is empty)."""
    if not path:
        return value
    _parent(document, path)[path[-1]] = value
    return document


def deleted(document: Any, path: tuple) -> Any:
    """`document` without the node at `path` (a dict key or a list element)."""
    if path:
        del _parent(document, path)[path[-1]]
    return document


NESTING_DEPTHS = st.sampled_from([50, 400, 700, 1200, 5000, 100_000])


@st.composite
def json_damage(draw, document):
    """`document` with one node replaced, deleted or nested too deeply."""
    path = draw(st.sampled_from(json_paths(document)))
    action = draw(st.sampled_from(["replace", "delete", "nest"]))
    if action == "delete" and path:
        return deleted(document, path)
    if action == "nest":
        return replaced(document, path, nested_marker(draw(NESTING_DEPTHS)))
    return replaced(document, path, draw(JSON_VALUES))


_DEEP_MARK = "\x00deep:"


def nested_marker(depth: int) -> str:
    """A placeholder that `json_text` writes as a list nested `depth` levels deep.

    json.dumps itself recurses and cannot write what it is meant to break.
    """
    return f"{_DEEP_MARK}{depth}"


def json_text(document: Any) -> str:
    """`json.dumps(document)` (NaN and Infinity allowed), nested markers expanded."""
    text = json.dumps(document, allow_nan=True)
    quoted = json.dumps(_DEEP_MARK)[:-1]
    while quoted in text:
        start = text.index(quoted)
        end = text.index('"', start + len(quoted))
        depth = int(text[start + len(quoted) : end])
        text = text[:start] + "[" * depth + "]" * depth + text[end + 1 :]
    return text
