"""Normalisation of observed values before freezing: numpy values, non-str mapping keys."""

from __future__ import annotations

from collections.abc import Mapping

from trainparity._internal.state.freeze import UnsupportedStateError
from trainparity._internal.state.paths import StatePath


class StableStateError(UnsupportedStateError):
    """Two mapping keys that become the same string (`1` and `"1"`)."""


def normalize_observation(value: object, path: StatePath = ()) -> object:
    """Plain-Python view of an observation (docs/compatibility.md, "Snapshots").

    numpy arrays become `{"dtype", "shape", "values"}` mappings, other numpy
    values become Python scalars, mapping keys become `str(key)` (so optimizer
    state keeps its integer indices as `"0"`), lists and tuples are walked
    (namedtuples and torch.Size become plain tuples).
    """
    return _normalized(value, path, set())


def _normalized(value: object, path: StatePath, open_containers: set[int]) -> object:
    module = type(value).__module__ or ""
    if module == "numpy" or module.startswith("numpy."):
        return _normalize_numpy(value, path)
    if not isinstance(value, (Mapping, list, tuple)):
        return value
    # A container that holds itself would recurse until RecursionError; freeze() reports
    # the same cycle, but normalisation runs first.
    marker = id(value)
    if marker in open_containers:
        raise UnsupportedStateError(path, "cyclic reference to an enclosing container")
    open_containers.add(marker)
    try:
        if isinstance(value, Mapping):
            normalized: dict[str, object] = {}
            for key, item in value.items():
                text = str(key)
                if text in normalized:
                    raise StableStateError(path, f"mapping keys collide as {text!r}")
                normalized[text] = _normalized(item, (*path, text), open_containers)
            return normalized
        items = [
            _normalized(item, (*path, index), open_containers) for index, item in enumerate(value)
        ]
        return items if isinstance(value, list) else tuple(items)
    finally:
        open_containers.discard(marker)


def _normalize_numpy(value: object, path: StatePath) -> object:
    import numpy

    if isinstance(value, numpy.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.tolist()}
    return value.item()  # type: ignore[attr-defined]
