"""L2 norms of k same-shaped tensors and of their pairwise differences, each buffer read once.

The C core (`distances` in src/_trainparity/distance.c) does the pass for
host buffers of float32, float64, bfloat16 and float16. GPU tensors are
measured on their device with torch in float64, and other floating dtypes
(float8, complex) are widened to float64 (complex: their modulus) on the host:
both are rare in training state and keep one answer for every dtype.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from trainparity._internal.native.core import core
from trainparity._internal.native.cuda import DeviceTensorBytes, core_threads

__all__ = ["NATIVE_DISTANCE_DTYPES", "Distances", "buffer_distances"]

NATIVE_DISTANCE_DTYPES = frozenset({"float32", "float64", "bfloat16", "float16"})


@dataclass(frozen=True)
class Distances:
    """`norms[i]` = ‖x_i‖₂; `pairs[(i, j)]` = (‖x_i − x_j‖₂, bytes identical) for i < j."""

    norms: tuple[float, ...]
    pairs: dict[tuple[int, int], tuple[float, bool]]
    nonfinite: tuple[int, ...]  # NaN and infinite elements of each buffer

    def distance(self, first: int, second: int) -> float:
        return self.pairs[(min(first, second), max(first, second))][0]

    def identical(self, first: int, second: int) -> bool:
        if first == second:
            return True
        return self.pairs[(min(first, second), max(first, second))][1]


def buffer_distances(dtype_name: str, buffers: Sequence[Any]) -> Distances:
    """Norms and pairwise distances of same-length element buffers (host or DeviceTensorBytes).

    `dtype_name`: the dtype as FrozenTensor.dtype gives it ("torch.float32") or bare ("float32").
    """
    if not buffers:
        raise ValueError("buffer_distances needs at least one buffer")
    # FrozenTensor.dtype is torch's text ("torch.float32"); the core takes the bare name.
    name = dtype_name.removeprefix("torch.")
    on_device = any(isinstance(buffer, DeviceTensorBytes) for buffer in buffers)
    if name in NATIVE_DISTANCE_DTYPES and not on_device:
        norms, distances, identical, nonfinite = core.distances(
            name, list(buffers), threads=min(16, core_threads(len(buffers[0])))
        )
        pairs = dict(
            zip(
                combinations(range(len(buffers)), 2),
                zip(distances, identical, strict=True),
                strict=True,
            )
        )
        return Distances(tuple(norms), pairs, tuple(nonfinite))
    return _torch_distances(dtype_name, buffers)


def _torch_distances(dtype_name: str, buffers: Sequence[Any]) -> Distances:
    """The same numbers from torch in float64: GPU buffers on their device, other dtypes widened."""
    import torch

    from trainparity._internal.native.dtypes import info_for_text

    entry = info_for_text(f"torch.{dtype_name.removeprefix('torch.')}")
    values = []
    for buffer in buffers:
        if isinstance(buffer, DeviceTensorBytes):
            raw = buffer.byte_view()
        else:
            raw = torch.frombuffer(bytearray(buffer), dtype=torch.uint8)
        typed = raw.view(entry.dtype)
        values.append(typed.abs().double() if typed.is_complex() else typed.double())
    byte_views = [
        buffer.byte_view() if isinstance(buffer, DeviceTensorBytes) else bytes(buffer)
        for buffer in buffers
    ]
    if len({value.device for value in values}) > 1:  # e.g. a CPU run against a GPU run
        values = [value.cpu() for value in values]
        byte_views = [view.cpu() if isinstance(view, torch.Tensor) else view for view in byte_views]
    norms = tuple(float(torch.linalg.vector_norm(value)) for value in values)
    nonfinite = tuple(int((~torch.isfinite(value)).sum()) for value in values)
    pairs = {}
    for first, second in combinations(range(len(values)), 2):
        left, right = byte_views[first], byte_views[second]
        if isinstance(left, torch.Tensor) or isinstance(right, torch.Tensor):
            left, right = _as_tensor(left), _as_tensor(right)
            same = bool(torch.equal(left, right))
        else:
            same = left == right
        gap = 0.0 if same else float(torch.linalg.vector_norm(values[first] - values[second]))
        pairs[(first, second)] = (gap, same)
    return Distances(norms, pairs, nonfinite)


def _as_tensor(view: Any) -> Any:
    import torch

    return (
        view
        if isinstance(view, torch.Tensor)
        else torch.frombuffer(bytearray(view), dtype=torch.uint8)
    )
