"""Tests the native digest against a pure-Python implementation of its written spec."""

from __future__ import annotations

import array
import ctypes
import json
import mmap
import random
import struct
import subprocess
import sys

import pytest

CHUNK = 65536
MASK64 = (1 << 64) - 1
ROOT_TAG = MASK64
STRIPE = 64
LANE_ROTATION = 23


def _splitmix64_mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _spec_secrets() -> list[int]:
    """The 20 secret words: splitmix64 seeded with the first 64 fraction bits of pi."""
    state = 0x243F6A8885A308D3
    words = []
    for _ in range(20):
        state = (state + 0x9E3779B97F4A7C15) & MASK64
        words.append(_splitmix64_mix(state))
    return words


SECRET = _spec_secrets()


def _mum(a: int, b: int) -> int:
    product = a * b
    return (product & MASK64) ^ (product >> 64)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK64


def _absorb(acc: list[int], data: bytes) -> None:
    """Absorbs whole 64-byte stripes: lane l takes bytes 16l..16l+15 of each stripe."""
    words = struct.unpack(f"<{len(data) // 8}Q", data)
    for stripe_start in range(0, len(words), 8):
        for lane in range(4):
            first = words[stripe_start + 2 * lane]
            second = words[stripe_start + 2 * lane + 1]
            mixed = _mum(first ^ SECRET[2 * lane], second ^ SECRET[2 * lane + 1] ^ acc[lane])
            acc[lane] = (mixed + (_rotl(acc[lane], LANE_ROTATION) ^ first ^ second)) & MASK64


def _finish(acc: list[int], tag: int, length: int) -> bytes:
    left = _mum(acc[0] ^ tag ^ SECRET[8], acc[1] ^ SECRET[9])
    right = _mum(acc[2] ^ length ^ SECRET[10], acc[3] ^ SECRET[11])
    return struct.pack(
        "<QQ",
        _mum(left ^ SECRET[12], right ^ SECRET[13]),
        _mum(left ^ SECRET[14], right ^ SECRET[15]),
    )


def _lane_hash(message: bytes, tag: int, length: int) -> bytes:
    acc = SECRET[16:20]
    padded = message + bytes(-len(message) % STRIPE)
    _absorb(acc, padded)
    return _finish(acc, tag, length)


def reference_digest(data: bytes) -> bytes:
    chunk_digests = b"".join(
        _lane_hash(data[start : start + CHUNK], start // CHUNK, len(data[start : start + CHUNK]))
        for start in range(0, len(data), CHUNK)
    )
    return _lane_hash(chunk_digests, ROOT_TAG, len(data))


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
    assert core.DIGEST_VERSION == 1


# Known-answer vectors from the "Digest" section of docs/design.md.
KNOWN_ANSWERS = [
    ("empty", b"", "8439642e7351cd4813013a529d043c24"),
    ("a", b"a", "7a25fbec4b6a76cd49d828224804c7e2"),
    ("range256", bytes(range(256)), "73e79e53afceb198aead007c6e3e3bd3"),
    ("zeros_1mib", bytes(1 << 20), "633a5643be7f4bff7ec78fb79d85a566"),
    ("pattern_3chunks_plus_5", _pattern(3 * CHUNK + 5), "815b93929a1dbd86bb9060e387d4fd52"),
]


@pytest.mark.parametrize(
    ("name", "data", "expected_hex"), KNOWN_ANSWERS, ids=[k[0] for k in KNOWN_ANSWERS]
)
def test_known_answer_vectors(core, name, data, expected_hex):
    assert core.digest(data).hex() == expected_hex
    assert reference_digest(data).hex() == expected_hex


# Chunk digests D_0..D_3 of the pattern vector, from the doc (for implementers to debug with).
PATTERN_CHUNK_DIGESTS = [
    "87eab4b2857ff0456cf44676e59b94fc",
    "da642b33a930c27952c75fe616e468e8",
    "2bf0ed3e898337d3b4a3f4516e5aeb3a",
    "ceee5011b30c5cbc80181fc8f8eb5cb6",
]


def test_documented_chunk_digests_of_the_pattern():
    data = _pattern(3 * CHUNK + 5)
    chunks = [data[start : start + CHUNK] for start in range(0, len(data), CHUNK)]
    computed = [_lane_hash(chunk, index, len(chunk)).hex() for index, chunk in enumerate(chunks)]
    assert computed == PATTERN_CHUNK_DIGESTS


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


@pytest.mark.parametrize("length", BOUNDARY_LENGTHS)
def test_matches_reference_at_stripe_and_chunk_boundaries(core, length):
    data = _random_bytes(length, length)
    assert core.digest(data) == reference_digest(data)


def test_matches_reference_on_random_lengths(core):
    rng = random.Random(20240611)
    for _ in range(12):
        length = rng.randrange(0, 4 * CHUNK + 300)
        data = rng.randbytes(length)
        assert core.digest(data) == reference_digest(data), f"length {length}"


@pytest.mark.skipif(sys.maxsize < 2**40, reason="needs a 64-bit address space")
def test_matches_reference_beyond_one_round_of_chunks(core):
    """Over 4 GiB the chunk digests are produced in several rounds; the result must not show it.

    All-zero full chunks differ only in their index, so the reference hashes one
    and finalises it per index (the lane state never depends on the index).
    """
    length = (1 << 32) + CHUNK + 3
    zero_pages = mmap.mmap(-1, length, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    try:
        full_chunks = length // CHUNK
        full_chunk_acc = SECRET[16:20]
        _absorb(full_chunk_acc, bytes(CHUNK))
        chunk_digests = [_finish(full_chunk_acc, index, CHUNK) for index in range(full_chunks)]
        chunk_digests.append(_lane_hash(bytes(3), full_chunks, 3))
        expected = _lane_hash(b"".join(chunk_digests), ROOT_TAG, length)
        assert core.digest(zero_pages, threads=2) == expected
    finally:
        zero_pages.close()


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


def test_every_single_bit_flip_changes_the_digest(core, float_data):
    seen = {core.digest(float_data)}
    positions = _sampled_bit_positions(len(float_data))
    for bit in positions:
        seen.add(core.digest(_flip_bit(float_data, bit)))
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
def test_swapping_two_float32_elements_changes_the_digest(core, float_data, first, second):
    assert core.digest(_swap_float32(float_data, first, second)) != core.digest(float_data)


def test_shifting_by_one_byte_changes_the_digest(core, float_data):
    base = core.digest(float_data)
    assert core.digest(float_data[1:] + float_data[:1]) != base
    assert core.digest(float_data[-1:] + float_data[:-1]) != base
    assert core.digest(b"\0" + float_data[:-1]) != base


@pytest.mark.parametrize("length", [0, 1, 10, 63, 64, 65, CHUNK - 1, CHUNK, CHUNK + 1])
def test_appending_a_zero_byte_or_truncating_changes_the_digest(core, length):
    data = bytes(length)
    digests = {core.digest(data), core.digest(data + b"\0")}
    if length > 0:
        digests.add(core.digest(data[:-1]))
    assert len(digests) == (3 if length > 0 else 2)


def test_sign_of_zero_changes_the_digest(core):
    positive = array.array("f", [0.0] * 1000)
    negative = array.array("f", [0.0] * 1000)
    negative[517] = -0.0
    assert core.digest(positive) != core.digest(negative)


def test_one_ulp_changes_the_digest(core, float_data):
    values = array.array("f", float_data)
    as_bits = array.array("I", values.tobytes())
    for index in (0, 12345, len(values) - 1):
        nudged = array.array("I", as_bits)
        nudged[index] += 1
        assert array.array("f", nudged.tobytes())[index] != values[index]
        assert core.digest(nudged) != core.digest(as_bits)


def test_a_shifted_matrix_row_changes_the_digest(core):
    rows, columns = 300, 257
    rng = random.Random(11)
    matrix = [[rng.uniform(-1, 1) for _ in range(columns)] for _ in range(rows)]
    shifted = [list(row) for row in matrix]
    shifted[150] = shifted[150][1:] + shifted[150][:1]

    def as_bytes(m):
        return array.array("f", [value for row in m for value in row]).tobytes()

    assert core.digest(as_bytes(shifted)) != core.digest(as_bytes(matrix))


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
def test_avalanche_each_output_bit_flips_half_the_time(core, case):
    pairs = AVALANCHE_CASES[case](random.Random(99))
    trials = 2000
    flips_per_output_bit = [0] * 128
    total_distance = 0
    for _ in range(trials):
        original, flipped = next(pairs)
        difference = int.from_bytes(core.digest(original), "little") ^ int.from_bytes(
            core.digest(flipped), "little"
        )
        total_distance += difference.bit_count()
        for bit in range(128):
            flips_per_output_bit[bit] += (difference >> bit) & 1
    probabilities = [count / trials for count in flips_per_output_bit]
    assert min(probabilities) > 0.45 and max(probabilities) < 0.55, probabilities
    assert abs(total_distance / trials - 64) < 1.5


def test_alignment_does_not_change_the_digest(core):
    data = _random_bytes(12, 2 * CHUNK + 77)
    expected = core.digest(data)
    for offset in range(16):
        backing = bytearray(offset) + bytearray(data) + bytearray(16)
        assert core.digest(memoryview(backing)[offset : offset + len(data)]) == expected, offset


def test_thread_count_does_not_change_the_digest(core):
    data = _random_bytes(13, 9 * CHUNK + 3)
    expected = core.digest(data)
    for threads in (1, 2, 3, 8, 64, 10**30):
        assert core.digest(data, threads=threads) == expected, threads
    small = b"tiny input"
    assert core.digest(small, threads=8) == core.digest(small)


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
