"""The native core's `distances`: L2 norms of k buffers and of every pairwise difference, one pass.

The reference is torch in float64 over the widened values. The core sums in
fixed chunks of 4096 elements (src/_trainparity/distance.c): lengths around
its multiples exercise chunk boundaries; 2 to 4 buffers whose pairs all
differ take a specialised kernel, others the general one.
"""

from __future__ import annotations

import math
from itertools import combinations

import pytest
import torch
from trainparity._internal.native import distances as distances_module
from trainparity._internal.native.core import core
from trainparity._internal.native.distances import buffer_distances

CHUNK_ELEMENTS = 4096
DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}
LENGTHS = (1, 15, 16, 17, CHUNK_ELEMENTS - 1, CHUNK_ELEMENTS, CHUNK_ELEMENTS + 1, 3 * 4096 + 17)


def raw(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


def runs(dtype: torch.dtype, length: int, count: int, seed: int = 0) -> list[torch.Tensor]:
    """`count` tensors near one another, as runs of one training differ."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(length, generator=generator, dtype=torch.float64) * 3
    return [
        (base + 1e-2 * torch.randn(length, generator=generator, dtype=torch.float64)).to(dtype)
        for _ in range(count)
    ]


def reference(tensors: list[torch.Tensor]) -> tuple[list[float], list[float]]:
    """Norms and pairwise distances in float64 from torch."""
    wide = [tensor.double() for tensor in tensors]
    norms = [float(torch.linalg.vector_norm(value)) for value in wide]
    gaps = [float(torch.linalg.vector_norm(a - b)) for a, b in combinations(wide, 2)]
    return norms, gaps


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_norms_and_distances_equal_torch_in_float64(name: str, length: int, count: int) -> None:
    tensors = runs(DTYPES[name], length, count, seed=length * 10 + count)
    norms, gaps, identical, nonfinite = core.distances(name, [raw(t) for t in tensors])
    expected_norms, expected_gaps = reference(tensors)
    assert list(norms) == pytest.approx(expected_norms, rel=1e-12)
    assert list(gaps) == pytest.approx(expected_gaps, rel=1e-12)
    pairs = list(combinations(range(count), 2))
    assert len(gaps) == len(identical) == len(pairs)
    assert identical == tuple(raw(tensors[i]) == raw(tensors[j]) for i, j in pairs)
    assert nonfinite == (0,) * count


@pytest.mark.parametrize("name", sorted(DTYPES))
def test_pairs_come_in_order_and_equal_buffers_are_identical(name: str) -> None:
    a, b, c = runs(DTYPES[name], 5000, 3)
    buffers = [raw(a), raw(b), raw(a), raw(c)]  # buffer 2 repeats buffer 0
    norms, gaps, identical, _ = core.distances(name, buffers)
    # (0,1) (0,2) (0,3) (1,2) (1,3) (2,3)
    assert identical == (False, True, False, False, False, False)
    assert gaps[1] == 0.0
    assert gaps[0] == gaps[3] and gaps[2] == gaps[5]  # 2 is 0 again
    assert norms[0] == norms[2]
    _, expected_gaps = reference([a, b, a, c])
    assert list(gaps) == pytest.approx(expected_gaps, rel=1e-12)


def test_negative_zero_is_a_byte_difference_at_distance_zero() -> None:
    zeros = torch.zeros(100)
    negative = zeros.clone()
    negative[7] = -0.0
    norms, gaps, identical, nonfinite = core.distances("float32", [raw(zeros), raw(negative)])
    assert norms == (0.0, 0.0)
    assert gaps == (0.0,)
    assert identical == (False,)
    assert nonfinite == (0, 0)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("count", [2, 3, 5])
def test_nonfinite_elements_are_counted_and_poison_only_their_sums(name: str, count: int) -> None:
    tensors = runs(DTYPES[name], 3 * CHUNK_ELEMENTS + 5, count)
    tensors[1][3] = math.nan
    tensors[1][CHUNK_ELEMENTS + 2] = math.inf
    tensors[1][-1] = -math.inf
    norms, gaps, identical, nonfinite = core.distances(name, [raw(t) for t in tensors])
    assert nonfinite == (0, 3) + (0,) * (count - 2)
    assert math.isnan(norms[1])
    assert all(math.isfinite(norm) for index, norm in enumerate(norms) if index != 1)
    for (i, j), gap, same in zip(combinations(range(count), 2), gaps, identical, strict=True):
        assert not same
        assert math.isnan(gap) if 1 in (i, j) else math.isfinite(gap)


def test_an_infinity_alone_gives_an_infinite_norm() -> None:
    values = torch.ones(10, dtype=torch.float64)
    values[4] = math.inf
    norms, _, _, nonfinite = core.distances("float64", [raw(values), raw(torch.ones(10).double())])
    assert norms[0] == math.inf and nonfinite == (1, 0)


def test_identical_nan_buffers_are_identical_at_distance_zero() -> None:
    values = torch.full((50,), math.nan)
    _, gaps, identical, nonfinite = core.distances("float32", [raw(values), raw(values)])
    assert identical == (True,) and gaps == (0.0,) and nonfinite == (50, 50)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("count", [2, 3, 4, 6])
def test_results_do_not_depend_on_threads(name: str, count: int) -> None:
    tensors = runs(DTYPES[name], 11 * CHUNK_ELEMENTS + 123, count, seed=count)
    buffers = [raw(t) for t in tensors]
    results = [core.distances(name, buffers, threads=threads) for threads in (1, 2, 3, 7)]
    first = results[0]
    for result in results[1:]:
        assert result[2:] == first[2:]
        # bit for bit, not merely equal
        assert [float.hex(v) for v in result[0] + result[1]] == [
            float.hex(v) for v in first[0] + first[1]
        ]


def test_float64_values_whose_squares_overflow_give_finite_correct_norms() -> None:
    generator = torch.Generator().manual_seed(3)
    base = torch.randn(3 * CHUNK_ELEMENTS + 9, generator=generator, dtype=torch.float64) * 1e200
    tensors = [base, base * (1 + 1e-6), base * (1 - 2e-6), -base]
    norms, gaps, _, nonfinite = core.distances("float64", [raw(t) for t in tensors])
    assert nonfinite == (0, 0, 0, 0)
    assert all(math.isfinite(value) for value in norms + gaps)
    # the reference scales by a power of two, which is exact
    scale = 2.0**-600
    expected_norms = [float(torch.linalg.vector_norm(t * scale)) / scale for t in tensors]
    expected_gaps = [
        float(torch.linalg.vector_norm(a * scale - b * scale)) / scale
        for a, b in combinations(tensors, 2)
    ]
    assert list(norms) == pytest.approx(expected_norms, rel=1e-12)
    assert list(gaps) == pytest.approx(expected_gaps, rel=1e-12)
    assert norms[0] > 1e200


def test_overflow_in_one_chunk_only_keeps_the_others_exact() -> None:
    values = torch.full((2 * CHUNK_ELEMENTS,), 1.5, dtype=torch.float64)
    values[CHUNK_ELEMENTS + 1] = 1e300
    norms, _, _, _ = core.distances("float64", [raw(values)])
    assert norms[0] == pytest.approx(1e300, rel=1e-12)


@pytest.mark.parametrize("name", sorted(DTYPES))
@pytest.mark.parametrize("count", [1, 2, 3])
def test_empty_buffers_have_zero_norms_and_are_identical(name: str, count: int) -> None:
    norms, gaps, identical, nonfinite = core.distances(name, [b""] * count, threads=4)
    pairs = count * (count - 1) // 2
    assert norms == (0.0,) * count
    assert gaps == (0.0,) * pairs
    assert identical == (True,) * pairs
    assert nonfinite == (0,) * count


def test_any_buffer_object_is_read() -> None:
    values = torch.arange(10, dtype=torch.float32)
    as_bytes = raw(values)
    results = [
        core.distances("float32", [kind, as_bytes])
        for kind in (as_bytes, bytearray(as_bytes), memoryview(as_bytes), values.numpy())
    ]
    assert all(result == results[0] for result in results)
    assert results[0][2] == (True,)


def test_thirty_two_buffers_are_measured_and_thirty_three_rejected() -> None:
    tensors = runs(torch.float32, 100, 32)
    norms, gaps, _, _ = core.distances("float32", [raw(t) for t in tensors])
    assert len(norms) == 32 and len(gaps) == 32 * 31 // 2
    expected_norms, expected_gaps = reference(tensors)
    assert list(gaps) == pytest.approx(expected_gaps, rel=1e-12)
    with pytest.raises(ValueError, match="between 1 and 32 buffers, got 33"):
        core.distances("float32", [raw(tensors[0])] * 33)


def test_no_buffer_is_rejected() -> None:
    with pytest.raises(ValueError, match="between 1 and 32 buffers, got 0"):
        core.distances("float32", [])


def test_buffers_of_different_lengths_are_rejected() -> None:
    with pytest.raises(ValueError, match="buffer 2 has 8 bytes, buffer 0 has 12"):
        core.distances("float32", [b"\0" * 12, b"\0" * 12, b"\0" * 8])


def test_a_length_that_is_not_whole_elements_is_rejected() -> None:
    with pytest.raises(ValueError, match="byte length 6 is not a multiple of the float32 size 4"):
        core.distances("float32", [b"\0" * 6, b"\0" * 6])


@pytest.mark.parametrize("name", ["int32", "complex64", "torch.float32", "float8_e4m3fn", ""])
def test_other_dtypes_are_rejected_by_name(name: str) -> None:
    with pytest.raises(
        ValueError, match="supports float32, float64, bfloat16 and float16, not '"
    ) as raised:
        core.distances(name, [b"\0" * 8])
    assert repr(name)[1:-1] in str(raised.value)


@pytest.mark.parametrize("threads", [0, -1, 17])
def test_thread_counts_out_of_range_are_rejected(threads: int) -> None:
    with pytest.raises(ValueError, match=f"threads must be between 1 and 16, got {threads}"):
        core.distances("float32", [b"\0" * 8], threads=threads)


def test_a_non_buffer_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        core.distances("float32", [b"\0" * 4, 3.0])
    with pytest.raises(TypeError, match="sequence of buffers"):
        core.distances("float32", 3)


def test_buffer_distances_takes_the_frozen_dtype_text_to_the_core(monkeypatch) -> None:
    """FrozenTensor.dtype reads "torch.float32": that must reach the core, not torch."""

    def no_torch(*_arguments):
        raise AssertionError("the torch fallback was taken")

    monkeypatch.setattr(distances_module, "_torch_distances", no_torch)
    tensors = runs(torch.bfloat16, 1000, 3)
    buffers = [raw(t) for t in tensors]
    norms, gaps, identical, nonfinite = core.distances("bfloat16", buffers)
    for name in ("torch.bfloat16", "bfloat16"):
        found = buffer_distances(name, buffers)
        assert found.norms == norms and found.nonfinite == nonfinite
        assert [found.pairs[pair] for pair in combinations(range(3), 2)] == list(
            zip(gaps, identical, strict=True)
        )
