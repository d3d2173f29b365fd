"""The native `distances` on its own (run under AddressSanitizer and UBSan in CI): k buffers, one pass.

Torch-free: buffers are `array` and `struct` bytes, the reference is math.fsum
in float64. tests/test_native_distances.py checks every dtype against torch.
"""

from __future__ import annotations

import array
import math
import random
from itertools import combinations

import pytest

CHUNK = 4096


def floats(values) -> bytes:
    return array.array("f", values).tobytes()


def doubles(values) -> bytes:
    return array.array("d", values).tobytes()


def widened(raw: bytes) -> list[float]:
    return list(array.array("f", raw))


def reference(buffers: list[bytes]):
    values = [widened(buffer) for buffer in buffers]
    norms = [math.sqrt(math.fsum(v * v for v in found)) for found in values]
    pairs = [
        math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(values[i], values[j], strict=True)))
        for i, j in combinations(range(len(values)), 2)
    ]
    return norms, pairs


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7])
@pytest.mark.parametrize("length", [0, 1, 17, CHUNK - 1, CHUNK + 5, 3 * CHUNK + 11])
def test_norms_and_pairwise_distances_match_float64(core, count, length):
    generator = random.Random(count * 1000 + length)
    base = [generator.gauss(0, 1) for _ in range(length)]
    buffers = [floats(v + generator.gauss(0, 1e-6) * (i > 0) for v in base) for i in range(count)]
    norms, distances, identical, nonfinite = core.distances("float32", buffers)
    expected_norms, expected_pairs = reference(buffers)
    assert norms == pytest.approx(expected_norms, rel=1e-12, abs=1e-300)
    assert distances == pytest.approx(expected_pairs, rel=1e-9, abs=1e-300)
    assert identical == tuple(buffers[i] == buffers[j] for i, j in combinations(range(count), 2))
    assert nonfinite == (0,) * count


@pytest.mark.parametrize("threads", [2, 3, 7, 16])
def test_results_do_not_depend_on_the_thread_count(core, threads):
    generator = random.Random(5)
    buffers = [floats(generator.gauss(0, 1) for _ in range(9 * CHUNK + 3)) for _ in range(4)]
    assert core.distances("float32", buffers, threads=threads) == core.distances(
        "float32", buffers, threads=1
    )


def test_identical_buffers_and_non_finite_values(core):
    same = floats([1.0, 2.0, 3.0])
    nan = floats([1.0, math.nan, 3.0])
    norms, distances, identical, nonfinite = core.distances("float32", [same, same, nan])
    assert identical == (True, False, False)
    assert distances[0] == 0.0
    assert nonfinite == (0, 0, 1)
    assert math.isnan(norms[2])


def test_float64_sums_that_would_overflow_are_scaled(core):
    big = doubles([1e200, -1e200, 3e199])
    half = doubles([5e199, -5e199, 1.5e199])
    norms, distances, _, _ = core.distances("float64", [big, half])
    assert norms[0] == pytest.approx(math.sqrt(2 + 0.09) * 1e200, rel=1e-12)
    assert distances[0] == pytest.approx(norms[0] / 2, rel=1e-12)


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda core: core.distances("int32", [b"\0" * 4]), ValueError, "float32"),
        (lambda core: core.distances("float32", []), ValueError, "between 1 and"),
        (lambda core: core.distances("float32", [b"\0" * 4] * 33), ValueError, "between 1 and"),
        (lambda core: core.distances("float32", [b"\0" * 4, b"\0" * 8]), ValueError, "same byte"),
        (lambda core: core.distances("float32", [b"\0" * 5]), ValueError, "multiple"),
        (lambda core: core.distances("float32", [b"\0" * 4], threads=0), ValueError, "threads"),
        (lambda core: core.distances("float32", [object()]), TypeError, ""),
        (lambda core: core.distances("float32", 7), TypeError, "sequence"),
    ],
)
def test_bad_arguments_raise_with_a_reason(core, call, error, text):
    with pytest.raises(error, match=text):
        call(core)
