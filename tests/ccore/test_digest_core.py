"""Tests the native digest, both versions and every implementation path, against a pure-Python spec."""

from __future__ import annotations

import array
import ctypes
import functools
import json
import mmap
import os
import random
import struct
import subprocess
import sys

import pytest
from digest_reference import (
    CHUNK,
    ROOT_TAG,
    STRIPE,
    VERSIONS,
    absorb,
    finish,
    lane_hash,
    reference_digest,
    start,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def _pattern(length: int) -> bytes:
    return bytes(i % 251 for i in range(length))


def _random_bytes(seed: int, length: int) -> bytes:
    return random.Random(seed).randbytes(length)


def _flip_bit(data: bytes, bit: int) -> bytes:
    flipped = bytearray(data)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


def test_constants_are_the_documented_ones(core):
    assert core.DIGEST_CHUNK_BYTES == CHUNK
    assert core.DIGEST_VERSION == 2
    assert core.DIGEST_VERSIONS == VERSIONS
    assert core.DIGEST_PATHS[0] == "scalar"
    assert core.DIGEST_PATH in core.DIGEST_PATHS
    assert set(core.DIGEST_PATHS) <= {"scalar", "avx2", "avx512", "neon"}


# Known-answer vectors from the "Digest" section of docs/design.md, per version.
KNOWN_ANSWERS = {
    1: {
        "empty": "8439642e7351cd4813013a529d043c24",
        "a": "7a25fbec4b6a76cd49d828224804c7e2",
        "range256": "73e79e53afceb198aead007c6e3e3bd3",
        "zeros_1mib": "633a5643be7f4bff7ec78fb79d85a566",
        "pattern_3chunks_plus_5": "815b93929a1dbd86bb9060e387d4fd52",
    },
    2: {
        "empty": "315c1f84560e0cbe6f9947f29fbc911c",
        "a": "9c65d7fc2d65cd45d06bf6d3e8691a31",
        "range256": "97964095a73143141d919333c923dd59",
        "zeros_1mib": "17324812cf089bce2dafa7ddfef95017",
        "pattern_3chunks_plus_5": "2840e05fd0a5072bd59cc7eeb9ca73f1",
    },
}
KNOWN_ANSWER_INPUTS = {
    "empty": b"",
    "a": b"a",
    "range256": bytes(range(256)),
    "zeros_1mib": bytes(1 << 20),
    "pattern_3chunks_plus_5": _pattern(3 * CHUNK + 5),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", sorted(KNOWN_ANSWER_INPUTS))
def test_known_answer_vectors(core, version, name):
    data = KNOWN_ANSWER_INPUTS[name]
    expected_hex = KNOWN_ANSWERS[version][name]
    for path in core.DIGEST_PATHS if version == 2 else ("scalar",):
        assert core.digest(data, version=version, path=path).hex() == expected_hex, path
    assert reference_digest(data, version).hex() == expected_hex
    if version == core.DIGEST_VERSION:
        assert core.digest(data).hex() == expected_hex


# Chunk digests D_0..D_3 of the pattern vector, from the doc (for implementers to debug with).
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


@pytest.mark.parametrize("version", VERSIONS)
def test_documented_chunk_digests_of_the_pattern(version):
    data = _pattern(3 * CHUNK + 5)
    chunks = [data[start : start + CHUNK] for start in range(0, len(data), CHUNK)]
    computed = [
        lane_hash(version, chunk, index, len(chunk)).hex() for index, chunk in enumerate(chunks)
    ]
    assert computed == PATTERN_CHUNK_DIGESTS[version]


def test_documented_secrets_of_version_2():
    from digest_reference import SECRET

    # The first, last and a middle word of the table in docs/design.md.
    assert (SECRET[2][0], SECRET[2][15], SECRET[2][31]) == (
        0x567D3963A8866CCD,
        0x124ED8475547CE61,
        0x92429298CA774488,
    )


BOUNDARY_LENGTHS = [
    0,
    1,
    7,
    8,
    9,
    15,
    16,
    17,
    31,
    32,
    48,
    63,
    64,
    65,
    127,
    128,
    129,
    CHUNK - 1,
    CHUNK,
    CHUNK + 1,
    CHUNK + 64,
    2 * CHUNK - 63,
    4 * CHUNK - 1,
    4 * CHUNK,
    4 * CHUNK + 1,
    5 * CHUNK + 17,
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("length", BOUNDARY_LENGTHS)
def test_matches_reference_at_stripe_and_chunk_boundaries(core, version, length):
    data = _random_bytes(length, length)
    assert core.digest(data, version=version) == reference_digest(data, version)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=700), version=st.sampled_from(VERSIONS))
def test_matches_reference_on_short_inputs(core, data, version):
    assert core.digest(data, version=version) == reference_digest(data, version)


@settings(max_examples=12, deadline=None)
@given(
    length=st.integers(min_value=0, max_value=3 * CHUNK + 300),
    seed=st.integers(min_value=0, max_value=2**32),
    version=st.sampled_from(VERSIONS),
)
def test_matches_reference_on_random_lengths(core, length, seed, version):
    data = _random_bytes(seed, length)
    assert core.digest(data, version=version) == reference_digest(data, version)


@pytest.mark.skipif(sys.maxsize < 2**40, reason="needs a 64-bit address space")
@pytest.mark.parametrize("version", VERSIONS)
def test_matches_reference_beyond_one_round_of_chunks(core, version):
    """Over 4 GiB the chunk digests are produced in several rounds; the result must not show it.

    All-zero full chunks differ only in their index, so the reference hashes one
    and finalises it per index (the lane state never depends on the index).
    """
    length = (1 << 32) + CHUNK + 3
    zero_pages = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        full_chunks = length // CHUNK
        full_chunk_acc = start(version)
        absorb(version, full_chunk_acc, bytes(CHUNK))
        chunk_digests = [
            finish(version, list(full_chunk_acc), index, CHUNK) for index in range(full_chunks)
        ]
        chunk_digests.append(lane_hash(version, bytes(3), full_chunks, 3))
        expected = lane_hash(version, b"".join(chunk_digests), ROOT_TAG, length)
        assert core.digest(zero_pages, threads=2, version=version) == expected
    finally:
        zero_pages.close()


# ---- implementation paths: every one this machine runs gives the scalar path's bits ----


@pytest.mark.parametrize("length", [0, 1, 63, 64, 65, 1000, CHUNK - 1, CHUNK, 3 * CHUNK + 77])
def test_every_path_gives_the_scalar_digest(core, length):
    data = _random_bytes(length + 1, length)
    expected = core.digest(data, path="scalar")
    for path in core.DIGEST_PATHS:
        assert core.digest(data, path=path) == expected, path
        assert core.digest(data, path=path, threads=3) == expected, path
        assert core.digest_chunks(data, path=path) == core.digest_chunks(data, path="scalar")


@settings(max_examples=40, deadline=None)
@given(data=st.binary(max_size=3000), offset=st.integers(min_value=0, max_value=63))
def test_every_path_gives_the_scalar_digest_at_any_alignment(core, data, offset):
    backing = bytearray(offset) + bytearray(data)
    view = memoryview(backing)[offset:]
    expected = core.digest(data, path="scalar")
    for path in core.DIGEST_PATHS:
        assert core.digest(view, path=path) == expected, path


def test_paths_of_version_1(core):
    assert core.digest(b"abc", version=1, path="scalar") == core.digest(b"abc", version=1)
    for path in set(core.DIGEST_PATHS) - {"scalar"}:
        with pytest.raises(ValueError, match="not available for digest version 1"):
            core.digest(b"abc", version=1, path=path)


def test_unknown_paths_are_rejected(core):
    with pytest.raises(ValueError, match="path 'sse9' is not available .* available: scalar"):
        core.digest(b"abc", path="sse9")
    with pytest.raises(ValueError, match="path 'sse9'"):
        core.digest_chunks(b"abc", path="sse9")
    with pytest.raises(TypeError, match="path must be a str or None"):
        core.digest(b"abc", path=2)
    assert core.digest(b"abc", path=None) == core.digest(b"abc")


def test_versions_are_checked(core):
    for function, args in (
        (core.digest, (b"abc",)),
        (core.digest_chunks, (b"abc",)),
        (core.digest_root, (core.digest_chunks(b"abc"), 3)),
    ):
        for version in (0, 3, -1, 2**70):
            with pytest.raises(ValueError, match=r"supported digest versions \(1, 2\)"):
                function(*args, version=version)
        for version in ("2", 2.0, True, None):
            with pytest.raises(TypeError, match="version must be an int"):
                function(*args, version=version)


_CHOSEN_PATH = """
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.ExtensionFileLoader("_trainparity", sys.argv[1])
spec = importlib.util.spec_from_file_location("_trainparity", sys.argv[1], loader=loader)
core = importlib.util.module_from_spec(spec)
try:
    loader.exec_module(core)
except ValueError as error:
    print("error:", error)
else:
    print(core.DIGEST_PATH, core.digest(b"abc").hex())
"""


def _chosen_path(core, value: str | None) -> str:
    environment = {
        key: item for key, item in os.environ.items() if key != "TRAINPARITY_DIGEST_PATH"
    }
    if value is not None:
        environment["TRAINPARITY_DIGEST_PATH"] = value
    child = subprocess.run(
        [sys.executable, "-c", _CHOSEN_PATH, core.__file__],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment,
    )
    assert child.returncode == 0, child.stderr
    return child.stdout.strip()


def test_the_environment_variable_chooses_the_default_path(core):
    expected = core.digest(b"abc").hex()
    assert _chosen_path(core, None) == f"{core.DIGEST_PATHS[-1]} {expected}"
    for path in core.DIGEST_PATHS:
        assert _chosen_path(core, path) == f"{path} {expected}"
    assert _chosen_path(core, "") == f"{core.DIGEST_PATHS[-1]} {expected}"
    refused = _chosen_path(core, "sse9")
    assert refused.startswith("error: TRAINPARITY_DIGEST_PATH='sse9' is not a digest path")
    assert "scalar" in refused


@pytest.fixture(params=VERSIONS, ids=lambda version: f"v{version}")
def digest(core, request):
    """core.digest of one version (each test below runs for every version)."""
    return functools.partial(core.digest, version=request.param)


@pytest.fixture(scope="module")
def float_data() -> bytes:
    """3 chunks and a bit of float32 values, all distinct."""
    rng = random.Random(7)
    count = (3 * CHUNK + 20) // 4
    return struct.pack(f"<{count}f", *(rng.uniform(-10.0, 10.0) for _ in range(count)))


def _sampled_bit_positions(length: int) -> list[int]:
    interesting_bytes = {0, length - 1}
    for boundary in range(STRIPE, length, STRIPE * 97):
        interesting_bytes.update({boundary - 1, boundary})
    for boundary in range(CHUNK, length, CHUNK):
        interesting_bytes.update({boundary - 1, boundary, boundary + 1})
    rng = random.Random(3)
    bits = {8 * byte + rng.randrange(8) for byte in interesting_bytes}
    bits.update({0, 7, 8 * length - 1, 8 * length - 8})
    bits.update(rng.randrange(8 * length) for _ in range(200))
    return sorted(bits)


def test_every_single_bit_flip_changes_the_digest(digest, float_data):
    seen = {digest(float_data)}
    positions = _sampled_bit_positions(len(float_data))
    for bit in positions:
        seen.add(digest(_flip_bit(float_data, bit)))
    assert len(seen) == len(positions) + 1


def _swap_float32(data: bytes, first: int, second: int) -> bytes:
    values = array.array("f", data)
    values[first], values[second] = values[second], values[first]
    return values.tobytes()


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (0, 1),  # inside one 8-byte word
        (1, 2),  # across two words of one lane
        (3, 4),  # across two lanes
        (0, 16),  # same lane position, consecutive stripes
        (5, 5 + CHUNK // 4),  # same offset, consecutive chunks
        (CHUNK // 4 - 1, CHUNK // 4),  # across a chunk boundary
        (3 * CHUNK // 4 + 1, 3 * CHUNK // 4 + 4),  # inside the tail chunk
    ],
)
def test_swapping_two_float32_elements_changes_the_digest(digest, float_data, first, second):
    assert digest(_swap_float32(float_data, first, second)) != digest(float_data)


def test_shifting_by_one_byte_changes_the_digest(digest, float_data):
    base = digest(float_data)
    assert digest(float_data[1:] + float_data[:1]) != base
    assert digest(float_data[-1:] + float_data[:-1]) != base
    assert digest(b"\0" + float_data[:-1]) != base


@pytest.mark.parametrize("length", [0, 1, 10, 63, 64, 65, CHUNK - 1, CHUNK, CHUNK + 1])
def test_appending_a_zero_byte_or_truncating_changes_the_digest(digest, length):
    data = bytes(length)
    digests = {digest(data), digest(data + b"\0")}
    if length > 0:
        digests.add(digest(data[:-1]))
    assert len(digests) == (3 if length > 0 else 2)


def test_sign_of_zero_changes_the_digest(digest):
    positive = array.array("f", [0.0] * 1000)
    negative = array.array("f", [0.0] * 1000)
    negative[517] = -0.0
    assert digest(positive) != digest(negative)


def test_one_ulp_changes_the_digest(digest, float_data):
    values = array.array("f", float_data)
    as_bits = array.array("I", values.tobytes())
    for index in (0, 12345, len(values) - 1):
        nudged = array.array("I", as_bits)
        nudged[index] += 1
        assert array.array("f", nudged.tobytes())[index] != values[index]
        assert digest(nudged) != digest(as_bits)


def test_a_shifted_matrix_row_changes_the_digest(digest):
    rows, columns = 300, 257
    rng = random.Random(11)
    matrix = [[rng.uniform(-1, 1) for _ in range(columns)] for _ in range(rows)]
    shifted = [list(row) for row in matrix]
    shifted[150] = shifted[150][1:] + shifted[150][:1]

    def as_bytes(m):
        return array.array("f", [value for row in m for value in row]).tobytes()

    assert digest(as_bytes(shifted)) != digest(as_bytes(matrix))


def _flips_in_one_input(data: bytes, rng: random.Random):
    while True:
        yield data, _flip_bit(data, rng.randrange(8 * len(data)))


def _flips_in_fresh_short_inputs(rng: random.Random):
    """Short inputs have few bits, so each trial draws a new one (1..200 bytes, tails incl.)."""
    while True:
        data = rng.randbytes(rng.randrange(1, 201))
        yield data, _flip_bit(data, rng.randrange(8 * len(data)))


AVALANCHE_CASES = {
    "random_2_chunks": lambda rng: _flips_in_one_input(_random_bytes(5, 2 * CHUNK + 100), rng),
    "zeros_2_chunks": lambda rng: _flips_in_one_input(bytes(2 * CHUNK + 100), rng),
    "short_inputs": _flips_in_fresh_short_inputs,
}


@pytest.mark.parametrize("case", sorted(AVALANCHE_CASES))
def test_avalanche_each_output_bit_flips_half_the_time(digest, case):
    pairs = AVALANCHE_CASES[case](random.Random(99))
    trials = 2000
    flips_per_output_bit = [0] * 128
    total_distance = 0
    for _ in range(trials):
        original, flipped = next(pairs)
        difference = int.from_bytes(digest(original), "little") ^ int.from_bytes(
            digest(flipped), "little"
        )
        total_distance += difference.bit_count()
        for bit in range(128):
            flips_per_output_bit[bit] += (difference >> bit) & 1
    probabilities = [count / trials for count in flips_per_output_bit]
    assert min(probabilities) > 0.45 and max(probabilities) < 0.55, probabilities
    assert abs(total_distance / trials - 64) < 1.5


def test_alignment_does_not_change_the_digest(digest):
    data = _random_bytes(12, 2 * CHUNK + 77)
    expected = digest(data)
    for offset in range(16):
        backing = bytearray(offset) + bytearray(data) + bytearray(16)
        assert digest(memoryview(backing)[offset : offset + len(data)]) == expected, offset


def test_thread_count_does_not_change_the_digest(digest):
    data = _random_bytes(13, 9 * CHUNK + 3)
    expected = digest(data)
    for threads in (1, 2, 3, 8, 64, 10**30):
        assert digest(data, threads=threads) == expected, threads
    small = b"tiny input"
    assert digest(small, threads=8) == digest(small)


# Runs in a child process that caps its address space so that no 8 MiB thread
# stack fits (glibc would otherwise reuse cached stacks of earlier threads). It
# hashes nothing before, so no freed buffer of chunk digests can be reused.
_THREADS_CANNOT_START = """
import importlib.machinery, importlib.util, json, resource, sys, threading
loader = importlib.machinery.ExtensionFileLoader("_trainparity", sys.argv[1])
spec = importlib.util.spec_from_file_location("_trainparity", sys.argv[1], loader=loader)
core = importlib.util.module_from_spec(spec)
loader.exec_module(core)
with open("/proc/self/status") as status:
    vm_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, ((vm_kib + 4096) * 1024, resource.RLIM_INFINITY))
digest_hex = core.digest(bytes(range(256)) * 2305, threads=8).hex()
try:
    threading.Thread(target=int).start()
    threads_blocked = False
except RuntimeError:
    threads_blocked = True
print(json.dumps({"digest": digest_hex, "threads_blocked": threads_blocked}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_threads_that_cannot_start_leave_the_digest_unchanged(core):
    child = subprocess.run(
        [sys.executable, "-c", _THREADS_CANNOT_START, core.__file__],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, child.stderr
    outcome = json.loads(child.stdout)
    if not outcome["threads_blocked"]:
        pytest.skip("an address-space limit did not stop thread creation here")
    assert outcome["digest"] == core.digest(bytes(range(256)) * 2305).hex()


def test_every_buffer_kind_digests_its_bytes(core):
    data = _random_bytes(14, CHUNK + 36)
    expected = core.digest(data)
    mapped = mmap.mmap(-1, len(data))
    try:
        mapped.write(data)
        assert core.digest(mapped) == expected
    finally:
        mapped.close()
    c_array = (ctypes.c_float * (len(data) // 4)).from_buffer_copy(data)
    assert core.digest(memoryview(c_array)) == expected
    assert core.digest(bytearray(data)) == expected
    assert core.digest(array.array("f", data)) == expected
    assert core.digest(memoryview(data).cast("B", (len(data) // 4, 4))) == expected
    assert core.digest(data=data) == expected


def test_zero_threads_is_rejected(core):
    for threads in (0, -1, -(10**30)):
        with pytest.raises(ValueError, match="threads must be >= 1"):
            core.digest(b"abc", threads=threads)


def test_non_integer_threads_are_rejected(core):
    for threads in (1.5, "2", True, None):
        with pytest.raises(TypeError, match="threads must be an int"):
            core.digest(b"abc", threads=threads)


def test_threads_is_keyword_only(core):
    with pytest.raises(TypeError):
        core.digest(b"abc", 2)


def test_non_buffer_is_rejected(core):
    for data in ("text", 42, [1, 2, 3], None):
        with pytest.raises(TypeError, match="buffer protocol"):
            core.digest(data)


def test_non_contiguous_buffer_is_rejected(core):
    strided = memoryview(bytes(range(64)))[::2]
    with pytest.raises(ValueError, match="C-contiguous"):
        core.digest(strided)
