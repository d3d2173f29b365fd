"""The streaming entry points of the native core agree bit for bit with the whole-buffer ones.

compare_accumulate/compare_finish and digest_chunks/digest_root exist so that a
buffer too large to hold (a GPU tensor streamed to the host) can be compared and
digested block by block; the result must be that of one call over the whole.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

CHUNK_ELEMENTS = 32768
DIGEST_CHUNK = 65536

ITEMSIZE = {
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
    "complex32": 4,
    "complex64": 8,
    "complex128": 16,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "float8_e8m0fnu": 1,
}
MODES = {
    "exact": {},
    "tolerance": {"rtol": 1e-3, "atol": 1e-5},
    "equal_nan": {"rtol": 1e-3, "atol": 1e-5, "equal_nan": True},
}


def result_bits(result: tuple) -> tuple:
    """The result with floats as their bit patterns, so 0.0 and -0.0 (and NaNs) are told apart."""
    return tuple(struct.pack("<d", x) if isinstance(x, float) else x for x in result)


def pair(dtype: str, count: int, seed: int, changed_share: float = 0.01) -> tuple[bytes, bytes]:
    """Random element bytes (every bit pattern: NaN, Inf, subnormals) and a copy with some changed."""
    rng = np.random.default_rng(seed)
    size = ITEMSIZE[dtype]
    baseline = rng.integers(0, 256, count * size, dtype=np.uint8)
    if dtype == "bool":
        baseline &= 1
    candidate = baseline.copy().reshape(count, size)
    changed = rng.random(count) < changed_share
    low_byte = candidate[changed, 0].astype(np.int16) + 1
    candidate[changed, 0] = (low_byte % (2 if dtype == "bool" else 256)).astype(np.uint8)
    return baseline.tobytes(), candidate.tobytes()


def streamed(core, dtype, baseline, candidate, block_elements, **mode):
    size = ITEMSIZE[dtype]
    step = block_elements * size
    state = None
    for start in range(0, max(len(baseline), 1), step):
        state = core.compare_accumulate(
            dtype, baseline[start : start + step], candidate[start : start + step], state, **mode
        )
    return core.compare_finish(state)


@pytest.mark.parametrize("dtype", sorted(ITEMSIZE))
@pytest.mark.parametrize("mode", sorted(MODES))
def test_streamed_compare_equals_the_whole_buffer_compare(core, dtype, mode):
    count = 3 * CHUNK_ELEMENTS + 123
    baseline, candidate = pair(dtype, count, seed=len(dtype))
    whole = core.compare(dtype, baseline, candidate, **MODES[mode])
    for block_chunks in (1, 2, 4):
        got = streamed(
            core, dtype, baseline, candidate, block_chunks * CHUNK_ELEMENTS, **MODES[mode]
        )
        assert result_bits(got) == result_bits(whole), block_chunks


@pytest.mark.parametrize("mode", sorted(MODES))
def test_identical_leading_blocks_still_count_in_the_relative_rms(core, mode):
    values = np.linspace(1.0, 2.0, 3 * CHUNK_ELEMENTS, dtype=np.float32)
    changed = values.copy()
    changed[-1] = 3.0
    whole = core.compare("float32", values.tobytes(), changed.tobytes(), **MODES[mode])
    got = streamed(
        core, "float32", values.tobytes(), changed.tobytes(), CHUNK_ELEMENTS, **MODES[mode]
    )
    assert result_bits(got) == result_bits(whole)
    # The denominator holds every block's baseline values, not only the differing block's.
    expected = 1.0 / math.sqrt(float(np.sum(values.astype(np.float64) ** 2)))
    assert got[4] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_identical_nan_buffers_have_zero_magnitudes(core, mode):
    nans = np.full(2 * CHUNK_ELEMENTS + 5, np.nan, dtype=np.float32).tobytes()
    whole = core.compare("float32", nans, nans, **MODES[mode])
    assert result_bits(streamed(core, "float32", nans, nans, CHUNK_ELEMENTS, **MODES[mode])) == (
        result_bits(whole)
    )
    assert whole[2:] == (0.0, 0.0, 0.0)
    # A NaN block that differs elsewhere keeps the infinite "nothing finite" magnitudes.
    other = bytearray(nans)
    other[-1] ^= 0x01
    whole = core.compare("float32", nans, bytes(other), **MODES[mode])
    got = streamed(core, "float32", nans, bytes(other), CHUNK_ELEMENTS, **MODES[mode])
    assert result_bits(got) == result_bits(whole)
    assert got[2] == math.inf


def test_float64_overflow_rescaling_carries_across_blocks(core):
    values = np.ones(3 * CHUNK_ELEMENTS, dtype=np.float64)
    changed = values.copy()
    changed[5] = 2.0
    values[CHUNK_ELEMENTS + 7] = changed[CHUNK_ELEMENTS + 7] = 1.7e308
    values[2 * CHUNK_ELEMENTS + 1] = 1e300
    changed[2 * CHUNK_ELEMENTS + 1] = -1e300
    whole = core.compare("float64", values.tobytes(), changed.tobytes())
    got = streamed(core, "float64", values.tobytes(), changed.tobytes(), CHUNK_ELEMENTS)
    assert result_bits(got) == result_bits(whole)
    assert got[:2] == (5, 2) and math.isfinite(got[4])


def test_empty_stream(core):
    state = core.compare_accumulate("float32", b"", b"")
    assert core.compare_finish(state) == core.compare("float32", b"", b"") == (-1, 0, 0.0, 0.0, 0.0)


def test_first_mismatch_index_counts_earlier_blocks(core):
    values = np.zeros(2 * CHUNK_ELEMENTS, dtype=np.int32)
    changed = values.copy()
    changed[CHUNK_ELEMENTS + 9] = 1
    state = core.compare_accumulate("int32", values[:CHUNK_ELEMENTS], changed[:CHUNK_ELEMENTS])
    state = core.compare_accumulate(
        "int32", values[CHUNK_ELEMENTS:], changed[CHUNK_ELEMENTS:], state
    )
    assert core.compare_finish(state)[:2] == (CHUNK_ELEMENTS + 9, 1)


def test_a_block_ending_inside_a_chunk_must_be_the_last(core):
    short = np.zeros(CHUNK_ELEMENTS - 1, dtype=np.float32)
    state = core.compare_accumulate("float32", short, short)
    with pytest.raises(ValueError, match="not a multiple of 32768"):
        core.compare_accumulate("float32", short, short, state)


@pytest.mark.parametrize(
    "state",
    [(), (0,) * 10, "state", (1, 5, 0, -1.0, -1.0, 0.0, False, 0.0, False, True)],
)
def test_foreign_states_are_rejected(core, state):
    with pytest.raises(ValueError, match="returned by compare_accumulate"):
        core.compare_finish(state)


def test_compare_accumulate_checks_its_arguments_like_compare(core):
    with pytest.raises(ValueError, match="unknown dtype"):
        core.compare_accumulate("float31", b"", b"")
    with pytest.raises(ValueError, match="same byte length"):
        core.compare_accumulate("float32", b"\0" * 4, b"\0" * 8)
    with pytest.raises(ValueError, match="both rtol and atol"):
        core.compare_accumulate("float32", b"", b"", rtol=1.0)


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("length", [0, 1, 63, 64, DIGEST_CHUNK, 3 * DIGEST_CHUNK + 5])
@pytest.mark.parametrize("block_chunks", [1, 2, 3])
def test_streamed_digest_equals_the_whole_buffer_digest(core, version, length, block_chunks):
    data = bytes(np.random.default_rng(length).integers(0, 256, length, dtype=np.uint8))
    step = block_chunks * DIGEST_CHUNK
    digests = b"".join(
        core.digest_chunks(
            data[start : start + step],
            first_chunk=start // DIGEST_CHUNK,
            threads=2,
            version=version,
        )
        for start in range(0, length, step)
    )
    assert len(digests) == 16 * math.ceil(length / DIGEST_CHUNK)
    assert core.digest_root(digests, length, version=version) == core.digest(data, version=version)
    if version == core.DIGEST_VERSION:
        assert core.digest_root(digests, length) == core.digest(data)


# docs/design.md, "Digest": the chunk digests of the known-answer pattern, per version.
PATTERN_CHUNK_DIGESTS = {
    1: [
        "87eab4b2857ff0456cf44676e59b94fc",
        "da642b33a930c27952c75fe616e468e8",
        "2bf0ed3e898337d3b4a3f4516e5aeb3a",
        "ceee5011b30c5cbc80181fc8f8eb5cb6",
    ],
    2: [
        "8e84dcfd2d0222588cb79901817fb049",
        "e8ef0f37760ee1392d7cc2b0e2a2bc51",
        "7ce112cf3dea09363be5b055aec3b602",
        "95a462598884256e291894ff9c4a33ba",
    ],
}


@pytest.mark.parametrize("version", [1, 2])
def test_chunk_digests_are_the_documented_ones(core, version):
    pattern = bytes(i % 251 for i in range(3 * DIGEST_CHUNK + 5))
    expected = PATTERN_CHUNK_DIGESTS[version]
    digests = core.digest_chunks(pattern, version=version)
    assert [digests[i : i + 16].hex() for i in range(0, len(digests), 16)] == expected
    tail = core.digest_chunks(pattern[2 * DIGEST_CHUNK :], first_chunk=2, version=version)
    assert tail.hex() == "".join(expected[2:])


def test_digest_root_needs_every_chunk_digest(core):
    with pytest.raises(ValueError, match="all 2 chunks"):
        core.digest_root(b"\0" * 16, DIGEST_CHUNK + 1)
    with pytest.raises(TypeError, match="length must be an int"):
        core.digest_root(b"", 0.0)


def test_digest_chunks_rejects_bad_first_chunk(core):
    with pytest.raises(TypeError, match="first_chunk must be an int"):
        core.digest_chunks(b"x", first_chunk=1.0)
    with pytest.raises(ValueError, match="first_chunk"):
        core.digest_chunks(b"x", first_chunk=-1)
    with pytest.raises(ValueError, match="root tag"):
        core.digest_chunks(b"x", first_chunk=2**64 - 1)
    with pytest.raises(TypeError, match="digest_chunks\\(\\) threads"):
        core.digest_chunks(b"x", threads="2")
