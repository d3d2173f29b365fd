"""Tensor pairs of every bit pattern and bitwise result comparison, shared by the CUDA backend tests."""

from __future__ import annotations

import struct

import torch

CHUNK_ELEMENTS = 32768
# The dtypes the CUDA kernels compare; the others are streamed through the C core.
KERNEL_DTYPES = [
    "bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
    "float16", "bfloat16", "float32", "float64",
]  # fmt: skip
MODES = {
    "exact": {},
    "tolerance": {"rtol": 1e-3, "atol": 1e-5},
    "equal_nan": {"rtol": 1e-3, "atol": 1e-5, "equal_nan": True},
}


def result_bits(result) -> tuple:
    """Floats as bit patterns: 0.0 and -0.0 (and NaN payloads) are told apart."""
    return tuple(struct.pack("<d", x) if isinstance(x, float) else x for x in result)


def random_pair(name: str, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """CPU tensors of every bit pattern (NaN, Inf, subnormals, huge float64) and a copy with ~1% changed."""
    dtype = getattr(torch, name)
    generator = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (count, dtype.itemsize), dtype=torch.uint8, generator=generator)
    if name == "bool":
        raw &= 1
    changed = raw.clone()
    changed[torch.rand(count, generator=generator) < 0.01, 0] ^= 1
    return raw.reshape(-1).view(dtype), changed.reshape(-1).view(dtype)


def special_value_pairs() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Signed zeros, NaN, Inf, subnormals, extremes, and float64 values whose squares overflow."""
    inf, nan = float("inf"), float("nan")
    pairs = [
        ("float32", [1.0, 2.0, -0.0, nan, inf, 1e-45, 3.0], [1.0, 3.0, 0.0, nan, inf, 0.0, -inf]),
        # Squares and differences that overflow double: the rescaled sums.
        ("float64", [1.7e308, 0.0, 1e300, -1e-310, 5.0], [-1.7e308, 0.0, 1e300, 1e-310, 5.0]),
        ("float16", [65504.0, -65504.0, 6e-8, nan], [-65504.0, 65504.0, 0.0, 1.0]),
        ("bfloat16", [3e38, 1.0, -2.0, inf], [-3e38, 1.0078125, -2.0, -inf]),
        ("int64", [2**62, -(2**63), 0, 5], [-(2**62), 2**63 - 1, 0, 5]),
    ]
    tensors = [
        (
            name,
            torch.tensor(left, dtype=getattr(torch, name)),
            torch.tensor(right, dtype=getattr(torch, name)),
        )
        for name, left, right in pairs
    ]
    # uint64 extremes, built from their int64 bit patterns.
    tensors.append(
        (
            "uint64",
            torch.tensor([-1, 0], dtype=torch.int64).view(torch.uint64),
            torch.tensor([0, -1], dtype=torch.int64).view(torch.uint64),
        )
    )
    return tensors


def overflowing_float64_pair() -> tuple[torch.Tensor, torch.Tensor]:
    """Three chunks and a bit: one chunk's squares overflow double, another's difference does."""
    values = torch.ones(3 * CHUNK_ELEMENTS + 5, dtype=torch.float64)
    changed = values.clone()
    changed[3] = 2.0
    values[CHUNK_ELEMENTS + 9] = changed[CHUNK_ELEMENTS + 9] = 1.5e308
    values[-1], changed[-1] = 1e300, -1e300
    return values, changed
