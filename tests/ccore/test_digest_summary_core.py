"""The fused digest+summary pass: its digest is digest()'s, its statistics summary()'s, bit for bit.

Also pins the statistics' reduction order (docs/design.md, "Summaries") with a
Python reference that adds in exactly that order, and checks that every
statistics path gives the portable path's bits.
"""

from __future__ import annotations

import array
import math
import random
import struct

import pytest

CHUNK = 65536
SIZES = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
}
FLOATS = ("float16", "bfloat16", "float32", "float64")


def bits(state: tuple) -> tuple:
    """A summary state with its floats as bit patterns, so NaN sums compare equal."""
    count, total, squares, max_abs, nan_count, inf_count = state
    as_bits = [
        struct.unpack("<Q", struct.pack("<d", value))[0] for value in (total, squares, max_abs)
    ]
    return (count, *as_bits, nan_count, inf_count)


def element_bytes(dtype: str, count: int, seed: int) -> bytes:
    """`count` elements: random bytes, or for floats mostly finite values with a few NaN/Inf/-0."""
    generator = random.Random(seed)
    if dtype not in ("float32", "float64"):
        return generator.randbytes(count * SIZES[dtype])
    values = [generator.uniform(-1e3, 1e3) for _ in range(count)]
    for position in generator.sample(range(count), min(count, 4)):
        values[position] = generator.choice([math.nan, math.inf, -math.inf, -0.0])
    return array.array("f" if dtype == "float32" else "d", values).tobytes()


def paths_of(core, version: int) -> tuple[str, ...]:
    return core.DIGEST_PATHS if version == 2 else ("scalar",)


# Lengths in elements around the stripe (64 bytes), the 2 KiB block and the chunk.
def counts_of(dtype: str) -> list[int]:
    size = SIZES[dtype]
    per_chunk = CHUNK // size
    return [0, 1, 7, 8, 9, 64 // size + 1, 2048 // size + 3, per_chunk - 1, per_chunk + 5]


@pytest.mark.parametrize("dtype", sorted(SIZES))
def test_fused_pass_equals_digest_and_summary(core, dtype):
    for count in counts_of(dtype):
        data = element_bytes(dtype, count, seed=count)
        expected_summary = bits(core.summary(dtype, data, path="scalar"))
        for version in core.DIGEST_VERSIONS:
            expected_digest = core.digest(data, version=version, path="scalar")
            for path in (None, *paths_of(core, version)):
                digest, state = core.digest_summary(dtype, data, version=version, path=path)
                assert digest == expected_digest, (count, version, path)
                assert bits(state) == expected_summary, (count, version, path)


@pytest.mark.parametrize("dtype", FLOATS + ("int32", "uint8"))
@pytest.mark.parametrize("offset", [1, 3, 6])
def test_fused_pass_at_any_alignment_and_thread_count(core, dtype, offset):
    data = element_bytes(dtype, (3 * CHUNK + 200) // SIZES[dtype], seed=offset)
    view = memoryview(bytearray(offset) + data)[offset:]
    expected = (core.digest(data), bits(core.summary(dtype, data, path="scalar")))
    for path in core.DIGEST_PATHS:
        for threads in (1, 2, 3, 7):
            digest, state = core.digest_summary(dtype, view, threads=threads, path=path)
            assert (digest, bits(state)) == expected, (path, threads)


@pytest.mark.parametrize("dtype", FLOATS)
def test_every_statistics_path_gives_the_portable_bits(core, dtype):
    assert core.SUMMARY_PATHS[0] == "scalar"
    assert core.SUMMARY_PATH in core.SUMMARY_PATHS
    # Random bit patterns: subnormals, NaNs with payloads, infinities, overflowing squares.
    data = random.Random(7).randbytes(2 * CHUNK + 8 * 13)
    expected = bits(core.summary(dtype, data, path="scalar"))
    for path in core.SUMMARY_PATHS:
        for offset in (0, 1):
            view = memoryview(bytearray(offset) + data)[offset:]
            assert bits(core.summary(dtype, view, path=path)) == expected, (path, offset)
            assert bits(core.summary(dtype, view, path=path, threads=3)) == expected, path


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int16"])
def test_streamed_blocks_give_the_whole_result(core, dtype):
    data = element_bytes(dtype, (5 * CHUNK + 100) // SIZES[dtype], seed=11)
    for block in (CHUNK, 2 * CHUNK):
        state, chunk_digests = None, b""
        for begin in range(0, len(data), block):
            digests, state = core.digest_summary_chunks(dtype, data[begin : begin + block], state)
            chunk_digests += digests
        assert chunk_digests == core.digest_chunks(data)
        assert core.digest_root(chunk_digests, len(data)) == core.digest(data)
        assert bits(state) == bits(core.summary(dtype, data))
    digests, state = core.digest_summary_chunks(dtype, b"")
    assert (digests, state) == (b"", (0, 0.0, 0.0, 0.0, 0, 0))


def reference_summary(values: list[float]) -> tuple:
    """The documented order: per chunk, element k into lane k % 8, each lane summed in
    element order from +0.0; lanes folded ((0+1)+(2+3))+((4+5)+(6+7)); chunks added in
    chunk order to a total starting at +0.0. Non-finite elements count, and add +0.0."""
    per_chunk = CHUNK // 4
    total = squares_total = max_abs = 0.0
    nan_count = inf_count = 0
    for begin in range(0, len(values), per_chunk):
        sums, squares = [0.0] * 8, [0.0] * 8
        for k, value in enumerate(values[begin : begin + per_chunk]):
            kept = value if math.isfinite(value) else 0.0
            sums[k % 8] += kept
            squares[k % 8] += kept * kept
            max_abs = max(max_abs, abs(kept))
            nan_count += math.isnan(value)
            inf_count += math.isinf(value)
        for lanes, name in ((sums, "sum"), (squares, "squares")):
            folded = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + (
                (lanes[4] + lanes[5]) + (lanes[6] + lanes[7])
            )
            if name == "sum":
                total += folded
            else:
                squares_total += folded
    return (len(values), total, squares_total, max_abs, nan_count, inf_count)


def test_statistics_follow_the_documented_order(core):
    data = element_bytes("float32", 2 * CHUNK // 4 + 21, seed=5)
    values = list(array.array("f", data))
    expected = bits(reference_summary(values))
    for path in core.SUMMARY_PATHS:
        assert bits(core.summary("float32", data, path=path)) == expected, path
    assert bits(core.digest_summary("float32", data)[1]) == expected


def test_misuse_is_refused(core):
    with pytest.raises(ValueError, match=r"digest_summary\(\) does not support dtype 'complex64'"):
        core.digest_summary("complex64", b"")
    with pytest.raises(ValueError, match="not a multiple of the float32 element size 4"):
        core.digest_summary("float32", b"abc")
    with pytest.raises(TypeError, match="buffer protocol"):
        core.digest_summary("float32", 3)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        core.digest_summary("float32", b"", threads=0)
    with pytest.raises(ValueError, match="path 'sse9' is not available"):
        core.digest_summary("float32", b"", path="sse9")
    with pytest.raises(ValueError, match="supported digest versions"):
        core.digest_summary("float32", b"", version=3)
    with pytest.raises(ValueError, match="whole chunks"):
        core.digest_summary_chunks("float32", b"", core.summary("float32", b"\0\0\0\0"))
    with pytest.raises(TypeError, match="6-tuple"):
        core.digest_summary_chunks("float32", b"", (1, 2))
    with pytest.raises(ValueError, match=r"summary\(\) path 'sse9' is not available"):
        core.summary("float32", b"", path="sse9")
