"""The native summary (count, sum, sum of squares, max |x|, NaN/Inf counts) against a Python reference."""

from __future__ import annotations

import array
import math
import random
import struct

import pytest

CHUNK = 65536


def reference(values: list[float]) -> tuple:
    finite = [value for value in values if math.isfinite(value)]
    return (
        len(values),
        math.fsum(finite),
        math.fsum(value * value for value in finite),
        max((abs(value) for value in finite), default=0.0),
        sum(1 for value in values if math.isnan(value)),
        sum(1 for value in values if math.isinf(value)),
    )


def assert_close(found: tuple, expected: tuple) -> None:
    assert found[0] == expected[0]
    assert found[4:] == expected[4:]
    assert found[3] == expected[3]
    for got, want in zip(found[1:3], expected[1:3], strict=True):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-12)


SPECIALS = [math.nan, math.inf, -math.inf, -0.0, 0.0]


def float_values(count: int, seed: int) -> list[float]:
    generator = random.Random(seed)
    values = [generator.uniform(-100, 100) for _ in range(count)]
    for position, special in zip(generator.sample(range(count), 5), SPECIALS, strict=True):
        values[position] = special
    return values


@pytest.mark.parametrize(("dtype", "code"), [("float32", "f"), ("float64", "d")])
def test_floats_match_the_reference(core, dtype, code):
    values = float_values(40_000, seed=3)
    data = struct.pack(f"<{len(values)}{code}", *values)
    stored = list(struct.unpack(f"<{len(values)}{code}", data))
    assert_close(core.summary(dtype, data), reference(stored))


def test_float16_decodes_subnormals_infinities_and_nan(core):
    values = [6e-8, -6e-8, 1e-5, 65504.0, -2.5, math.inf, -math.inf, math.nan, -0.0]
    data = struct.pack(f"<{len(values)}e", *values)
    stored = list(struct.unpack(f"<{len(values)}e", data))
    assert_close(core.summary("float16", data), reference(stored))


def test_bfloat16_is_the_upper_half_of_float32(core):
    values = [1.5, -3.25, 1e30, math.inf, math.nan, 0.0]
    words = struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values))
    data = struct.pack(f"<{len(values)}H", *(word >> 16 for word in words))
    stored = [struct.unpack("<f", struct.pack("<I", (word >> 16) << 16))[0] for word in words]
    assert_close(core.summary("bfloat16", data), reference(stored))


@pytest.mark.parametrize(
    ("dtype", "code"), [("int8", "b"), ("uint8", "B"), ("int32", "i"), ("int64", "q")]
)
def test_integers_are_counted_and_summed(core, dtype, code):
    generator = random.Random(5)
    low, high = (-128, 127) if code in "bB" else (-(10**6), 10**6)
    if code == "B":
        low = 0
    values = [generator.randint(low, high) for _ in range(10_000)]
    data = struct.pack(f"<{len(values)}{code}", *values)
    assert_close(core.summary(dtype, data), reference([float(value) for value in values]))


def test_result_is_independent_of_threads_and_streaming(core):
    values = float_values(5 * CHUNK // 4 + 123, seed=9)
    data = struct.pack(f"<{len(values)}f", *values)
    whole = core.summary("float32", data)
    assert all(core.summary("float32", data, threads=threads) == whole for threads in (2, 3, 7))
    state = None
    for begin in range(0, len(data), 2 * CHUNK):
        state = core.summary("float32", data[begin : begin + 2 * CHUNK], state)
    assert state == whole


def test_empty_buffer(core):
    assert core.summary("float32", b"") == (0, 0.0, 0.0, 0.0, 0, 0)


def test_misuse_is_refused(core):
    with pytest.raises(ValueError, match="does not support dtype 'complex64'"):
        core.summary("complex64", b"")
    with pytest.raises(ValueError, match="not a multiple of the float32 element size 4"):
        core.summary("float32", b"abc")
    with pytest.raises(TypeError, match="buffer protocol"):
        core.summary("float32", 3)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        core.summary("float32", b"", threads=0)
    with pytest.raises(ValueError, match="whole chunks"):
        core.summary("float32", b"", core.summary("float32", array.array("f", [1.0]).tobytes()))
    with pytest.raises(TypeError, match="6-tuple"):
        core.summary("float32", b"", (1, 2))
