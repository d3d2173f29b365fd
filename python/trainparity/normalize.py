"""Normalisation of observed values before freezing: numpy values, non-str mapping keys."""

from __future__ import annotations

from collections.abc import Mapping

from trainparity.paths import StatePath
from trainparity.state import UnsupportedStateError


class StableStateError(UnsupportedStateError):
    """Two mapping keys that become the same string (`1` and `"1"`)."""


def normalize_observation(value: object, path: StatePath = ()) -> object:
    """Plain-Python view of an observation (CONTRACT §4.3).

    numpy arrays become `{"dtype", "shape", "values"}` mappings, other numpy
    values become Python scalars, mapping keys become `str(key)` (so optimizer
    state keeps its integer indices as `"0"`), lists and tuples are walked
    (namedtuples and torch.Size become plain tuples).
    """
    module = type(value).__module__ or ""
    if module == "numpy" or module.startswith("numpy."):
        return _normalize_numpy(value, path)
    if isinstance(value, Mapping):
        normalized: dict[str, object] = {}
        for key, item in value.items():
            text = str(key)
            if text in normalized:
                raise StableStateError(path, f"mapping keys collide as {text!r}")
            normalized[text] = normalize_observation(item, (*path, text))
        return normalized
    if isinstance(value, list):
        return [normalize_observation(item, (*path, index)) for index, item in enumerate(value)]
    if isinstance(value, tuple):
        return tuple(
            normalize_observation(item, (*path, index)) for index, item in enumerate(value)
        )
    return value


def _normalize_numpy(value: object, path: StatePath) -> object:
    import numpy

    if isinstance(value, numpy.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.tolist()}
    return value.item()  # type: ignore[attr-defined]
