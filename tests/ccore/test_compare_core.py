"""Tests of the native compare core against its documented rules and a NumPy reference."""

from __future__ import annotations

import array
import ctypes
import math
import mmap
import struct
import zlib

import numpy as np
import pytest

# The core splits work into chunks of this many elements (docs/design.md,
# "Compare core"); lengths around its multiples exercise chunk boundaries.
CHUNK_ELEMENTS = 32768

INF = math.inf
NAN = math.nan

# dtype -> (component format, components per element); a component format is a
# NumPy dtype string, "bf16", or a float8 name.
LAYOUT = {
    "bool": ("|u1", 1),
    "uint8": ("|u1", 1),
    "int8": ("|i1", 1),
    "int16": ("<i2", 1),
    "int32": ("<i4", 1),
    "int64": ("<i8", 1),
    "uint16": ("<u2", 1),
    "uint32": ("<u4", 1),
    "uint64": ("<u8", 1),
    "float16": ("<f2", 1),
    "bfloat16": ("bf16", 1),
    "float32": ("<f4", 1),
    "float64": ("<f8", 1),
    "complex32": ("<f2", 2),
    "complex64": ("<f4", 2),
    "complex128": ("<f8", 2),
    "float8_e4m3fn": ("float8_e4m3fn", 1),
    "float8_e5m2": ("float8_e5m2", 1),
    "float8_e4m3fnuz": ("float8_e4m3fnuz", 1),
    "float8_e5m2fnuz": ("float8_e5m2fnuz", 1),
    "float8_e8m0fnu": ("float8_e8m0fnu", 1),
}
ALL_DTYPES = list(LAYOUT)
INTEGER_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64"]
FLOAT8_DTYPES = [name for name in ALL_DTYPES if name.startswith("float8")]
COMPLEX_DTYPES = ["complex32", "complex64", "complex128"]
FLOATING_DTYPES = [name for name in ALL_DTYPES if name not in INTEGER_DTYPES]
REAL_FLOAT_DTYPES = [name for name in FLOATING_DTYPES if name not in COMPLEX_DTYPES]


def component_bytes(fmt: str) -> int:
    if fmt == "bf16":
        return 2
    if fmt.startswith("float8"):
        return 1
    return np.dtype(fmt).itemsize


def itemsize(dtype: str) -> int:
    fmt, components = LAYOUT[dtype]
    return component_bytes(fmt) * components


# ---- reference decoders, written from the format definitions ----


def decode_float8(name: str, code: int) -> float:
    sign = -1.0 if code & 0x80 else 1.0
    if name == "float8_e8m0fnu":
        return NAN if code == 0xFF else math.ldexp(1.0, code - 127)
    mantissa_bits, bias = {
        "float8_e4m3fn": (3, 7),
        "float8_e5m2": (2, 15),
        "float8_e4m3fnuz": (3, 8),
        "float8_e5m2fnuz": (2, 16),
    }[name]
    exponent_max = (1 << (7 - mantissa_bits)) - 1
    exponent = (code & 0x7F) >> mantissa_bits
    mantissa = code & ((1 << mantissa_bits) - 1)
    if name.endswith("fnuz") and code == 0x80:
        return NAN
    if name == "float8_e4m3fn" and code & 0x7F == 0x7F:
        return NAN
    if name == "float8_e5m2" and exponent == exponent_max:
        return sign * INF if mantissa == 0 else NAN
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


FLOAT8_TABLES = {
    name: np.array([decode_float8(name, code) for code in range(256)]) for name in FLOAT8_DTYPES
}


def decode_components(fmt: str, data: bytes) -> np.ndarray:
    """Every component of `data` as float64."""
    with np.errstate(invalid="ignore"):  # signalling NaNs become quiet
        return decode_components_quietly(fmt, data)


def decode_components_quietly(fmt: str, data: bytes) -> np.ndarray:
    if fmt == "bf16":
        halves = np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16
        return halves.view(np.float32).astype(np.float64)
    if fmt.startswith("float8"):
        return FLOAT8_TABLES[fmt][np.frombuffer(data, dtype=np.uint8)]
    return np.frombuffer(data, dtype=fmt).astype(np.float64)


def decode(dtype: str, data: bytes) -> np.ndarray:
    """float64 values (complex128 for complex dtypes) of every element."""
    fmt, components = LAYOUT[dtype]
    values = decode_components(fmt, data)
    if components == 2:
        pairs = np.empty(values.size // 2, dtype=np.complex128)
        pairs.real, pairs.imag = values[0::2], values[1::2]  # `re + 1j * im` breaks on Inf
        return pairs
    return values


def modulus(dtype: str, values: np.ndarray) -> np.ndarray:
    """|value|; complex: sqrt(re^2 + im^2), complex128 scaled by a power of two first."""
    if dtype not in COMPLEX_DTYPES:
        return np.abs(values)
    re, im = values.real, values.imag
    if dtype != "complex128":
        return np.sqrt(re * re + im * im)
    larger = np.fmax(np.abs(re), np.abs(im))
    exponent = np.where(np.isfinite(larger), np.frexp(larger)[1], 0)
    re, im = np.ldexp(re, -exponent), np.ldexp(im, -exponent)
    return np.ldexp(np.sqrt(re * re + im * im), exponent)


def norm(values) -> tuple[float, int]:
    """2-norm of `values(scale)` as (mantissa, exponent) = mantissa * 2**exponent.

    `values` computes the elements from inputs multiplied by `scale`, so a
    norm whose square overflows double is taken again at a 2**-600 scale.
    """
    for exponent in (0, 600):
        scaled = values(2.0**-exponent)
        parts = np.concatenate([scaled.real, scaled.imag]) if np.iscomplexobj(scaled) else scaled
        total = math.fsum(parts * parts)
        if math.isfinite(total):
            return math.sqrt(total), exponent
    raise AssertionError("sum of squares overflows even when scaled")


def reference(dtype, baseline, candidate, rtol=None, atol=None, equal_nan=False):
    """The compare result computed from the rules in docs/design.md with NumPy."""
    size = itemsize(dtype)
    count = len(baseline) // size
    a, b = decode(dtype, baseline), decode(dtype, candidate)
    element_bytes = np.dtype((np.void, size))
    bytes_differ = np.frombuffer(baseline, element_bytes) != np.frombuffer(candidate, element_bytes)
    with np.errstate(all="ignore"):
        difference = a - b
        abs_error = modulus(dtype, difference)
        if rtol is None or dtype in INTEGER_DTYPES:
            mismatch = bytes_differ
        else:
            close = (
                (a == b)
                | (equal_nan & np.isnan(a) & np.isnan(b))
                | (np.isfinite(abs_error) & (abs_error <= atol + rtol * modulus(dtype, b)))
            )
            mismatch = ~close
        first = int(np.argmax(mismatch)) if mismatch.any() else -1
        if baseline == candidate:
            return (first, int(mismatch.sum()), 0.0, 0.0, 0.0)
        modulus_a = modulus(dtype, a)
        rel_error = abs_error / np.where(modulus_a > 0, modulus_a, 1.0)
        finite_abs = abs_error[np.isfinite(abs_error)]
        finite_rel = rel_error[np.isfinite(rel_error)]
        both_finite = np.isfinite(a) & np.isfinite(b)
        a_finite, b_finite = a[both_finite], b[both_finite]
        diff_norm, diff_exponent = norm(lambda scale: a_finite * scale - b_finite * scale)
        base_norm, base_exponent = norm(lambda scale: a_finite * scale)
    if diff_norm == 0:
        rms = 0.0
    elif base_norm == 0:
        rms = INF
    else:
        rms = math.ldexp(diff_norm / base_norm, diff_exponent - base_exponent)
    return (
        first,
        int(mismatch.sum()) if count else 0,
        float(finite_abs.max()) if finite_abs.size else INF,
        float(finite_rel.max()) if finite_rel.size else INF,
        rms,
    )


def assert_same_result(got, expected):
    assert got[:4] == expected[:4], (got, expected)
    assert got[4] == pytest.approx(expected[4], rel=1e-12, abs=0.0), (got, expected)


# ---- building buffers ----


def pack(dtype: str, values) -> bytes:
    """Little-endian bytes of Python numbers (complex for complex dtypes)."""
    fmt, components = LAYOUT[dtype]
    if dtype in COMPLEX_DTYPES:
        flat = [part for value in values for part in (complex(value).real, complex(value).imag)]
        return np.array(flat, dtype=fmt).tobytes()
    if fmt == "bf16":
        bits = np.array(values, dtype="<f4").view("<u4")
        assert not (bits & 0xFFFF).any(), "value not representable in bfloat16"
        return (bits >> 16).astype("<u2").tobytes()
    if fmt.startswith("float8"):
        table = FLOAT8_TABLES[fmt]
        codes = [int(np.flatnonzero(table == value)[0]) for value in values]
        return bytes(codes)
    return np.array(values, dtype=fmt).tobytes()


SPECIAL_BITS = {
    "<f2": [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x7E01, 0xFE00, 0x0001, 0x03FF, 0x3C00],
    "bf16": [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7FC1, 0xFFC0, 0x0001, 0x007F, 0x3F80],
    "<f4": [
        0,
        1 << 31,
        0x7F800000,
        0xFF800000,
        0x7FC00000,
        0x7FC00001,
        0xFFC00000,
        1,
        0x007FFFFF,
        0x3F800000,
        0x7F7FFFFF,
    ],
    "<f8": [
        0,
        1 << 63,
        0x7FF0000000000000,
        0xFFF0000000000000,
        0x7FF8000000000000,
        0x7FF8000000000001,
        0xFFF8000000000000,
        1,
        0x000FFFFFFFFFFFFF,
        0x3FF0000000000000,
        0x7FEFFFFFFFFFFFFF,
    ],
}
UNSIGNED_OF = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def random_component_bits(fmt: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """Unsigned bit patterns: raw random bits, special encodings and ordinary values."""
    unsigned = UNSIGNED_OF[component_bytes(fmt)]
    raw = rng.integers(0, np.iinfo(unsigned).max, size=count, dtype=unsigned, endpoint=True)
    if fmt not in SPECIAL_BITS:
        return raw
    if fmt == "bf16":
        ordinary = (rng.standard_normal(count).astype("<f4").view("<u4") >> 16).astype(unsigned)
    else:
        ordinary = (rng.standard_normal(count) * 4).astype(fmt).view(unsigned)
    special = np.array(SPECIAL_BITS[fmt], dtype=unsigned)[
        rng.integers(0, len(SPECIAL_BITS[fmt]), size=count)
    ]
    kind = rng.random(count)
    return np.where(kind < 0.25, raw, np.where(kind < 0.4, special, ordinary))


def random_pair(dtype: str, count: int, rng: np.random.Generator) -> tuple[bytes, bytes]:
    """Baseline and candidate that mostly agree, with nearby and unrelated changes."""
    fmt, components = LAYOUT[dtype]
    n = count * components
    if dtype == "bool":
        a = rng.integers(0, 2, size=n, dtype=np.uint8)
        b = np.where(rng.random(n) < 0.2, rng.integers(0, 2, size=n, dtype=np.uint8), a)
        return a.tobytes(), b.astype(np.uint8).tobytes()
    a = random_component_bits(fmt, n, rng)
    kind = rng.random(n)
    nudged = (a + rng.integers(-3, 4, size=n).astype(a.dtype)).astype(a.dtype)
    b = np.where(kind < 0.15, nudged, a)
    b = np.where((kind >= 0.15) & (kind < 0.2), random_component_bits(fmt, n, rng), b)
    return a.tobytes(), b.astype(a.dtype).tobytes()


MODES = [
    pytest.param({}, id="exact"),
    pytest.param({"rtol": 1e-3, "atol": 1e-5}, id="tolerance"),
    pytest.param({"rtol": 0.2, "atol": 0.0, "equal_nan": True}, id="tolerance-equal_nan"),
    pytest.param({"rtol": 0.0, "atol": 0.0}, id="tolerance-zero"),
]


# ---- agreement with the reference ----


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_agrees_with_reference_on_random_inputs(core, dtype, mode):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, mode)).encode()))
    lengths = [0, 1, *rng.integers(2, 70, size=8), *rng.integers(70, 5000, size=4)]
    for count in lengths:
        baseline, candidate = random_pair(dtype, int(count), rng)
        got = core.compare(dtype, baseline, candidate, **mode)
        assert_same_result(got, reference(dtype, baseline, candidate, **mode))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "complex64", "int64", "float8_e5m2"])
@pytest.mark.parametrize(
    "count", [CHUNK_ELEMENTS - 1, CHUNK_ELEMENTS, CHUNK_ELEMENTS + 1, 2 * CHUNK_ELEMENTS + 7]
)
def test_agrees_with_reference_across_chunk_boundaries(core, dtype, count):
    rng = np.random.default_rng(count)
    baseline, candidate = random_pair(dtype, count, rng)
    for mode in ({}, {"rtol": 1e-3, "atol": 1e-5}):
        got = core.compare(dtype, baseline, candidate, **mode)
        assert_same_result(got, reference(dtype, baseline, candidate, **mode))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32", "complex64"])
def test_every_length_up_to_67_finds_a_last_element_mismatch(core, dtype):
    for count in range(1, 68):
        values = [float(i % 7) for i in range(count)]
        changed = values[:-1] + [values[-1] + 1]
        got = core.compare(dtype, pack(dtype, values), pack(dtype, changed))
        assert got[:3] == (count - 1, 1, 1.0)
        got_tolerance = core.compare(
            dtype, pack(dtype, values), pack(dtype, changed), rtol=1e-3, atol=0.0
        )
        assert got_tolerance[:3] == (count - 1, 1, 1.0)


def test_float16_decoding_is_exact_for_every_encoding(core):
    codes = np.arange(65536, dtype="<u2")
    values = codes.view("<f2").astype(np.float64)
    baseline = codes.tobytes()
    candidate = np.zeros(65536, dtype="<u2").tobytes()
    for code in range(0, 65536, 257):  # one compare per code is slow; sample evenly
        got = core.compare(
            "float16", baseline[2 * code : 2 * code + 2], candidate[2 * code : 2 * code + 2]
        )
        expected = abs(values[code])
        if math.isfinite(expected):
            assert got[2] == expected
        else:
            assert got[2] == INF
    # All codes at once: the reference decodes with NumPy's own float16.
    assert_same_result(
        core.compare("float16", baseline, candidate), reference("float16", baseline, candidate)
    )


@pytest.mark.parametrize(
    ("dtype", "code", "value"),
    [
        ("float8_e4m3fn", 0x7E, 448.0),
        ("float8_e4m3fn", 0x01, 2.0**-9),
        ("float8_e4m3fn", 0x38, 1.0),
        ("float8_e5m2", 0x7B, 57344.0),
        ("float8_e5m2", 0x01, 2.0**-16),
        ("float8_e5m2", 0x3C, 1.0),
        ("float8_e4m3fnuz", 0x7F, 240.0),
        ("float8_e4m3fnuz", 0x01, 2.0**-10),
        ("float8_e4m3fnuz", 0x40, 1.0),
        ("float8_e5m2fnuz", 0x7F, 57344.0),
        ("float8_e5m2fnuz", 0x01, 2.0**-17),
        ("float8_e5m2fnuz", 0x40, 1.0),
        ("float8_e8m0fnu", 0x7F, 1.0),
        ("float8_e8m0fnu", 0x00, 2.0**-127),
        ("float8_e8m0fnu", 0xFE, 2.0**127),
    ],
)
def test_float8_known_values(core, dtype, code, value):
    zero = bytes([0x7F if dtype == "float8_e8m0fnu" else 0x00])
    reference_value = 1.0 if dtype == "float8_e8m0fnu" else 0.0
    got = core.compare(dtype, bytes([code]), zero, rtol=0.0, atol=0.0)
    assert got[2] == abs(value - reference_value)


@pytest.mark.parametrize(
    ("dtype", "nan_codes", "infinity_codes"),
    [
        ("float8_e4m3fn", [0x7F, 0xFF], []),
        ("float8_e5m2", [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF], [0x7C, 0xFC]),
        ("float8_e4m3fnuz", [0x80], []),
        ("float8_e5m2fnuz", [0x80], []),
        ("float8_e8m0fnu", [0xFF], []),
    ],
)
def test_float8_special_encodings(core, dtype, nan_codes, infinity_codes):
    for code in range(256):
        pair = (bytes([code]), bytes([code]))
        closes_with_itself = core.compare(dtype, *pair, rtol=0.0, atol=0.0)[1] == 0
        closes_with_itself_under_equal_nan = (
            core.compare(dtype, *pair, rtol=0.0, atol=0.0, equal_nan=True)[1] == 0
        )
        assert closes_with_itself_under_equal_nan
        assert closes_with_itself == (code not in nan_codes), code
    for code in infinity_codes:
        other = code ^ 0x80
        assert core.compare(dtype, bytes([code]), bytes([other]), rtol=1.0, atol=1e30)[1] == 1
    # 0x00 and 0x80 are +0 and -0 where the format has a signed zero.
    if dtype in ("float8_e4m3fn", "float8_e5m2"):
        assert core.compare(dtype, b"\x00", b"\x80")[:2] == (0, 1)
        assert core.compare(dtype, b"\x00", b"\x80", rtol=0.0, atol=0.0)[:2] == (-1, 0)


# ---- documented semantics, one rule at a time ----


@pytest.mark.parametrize("dtype", REAL_FLOAT_DTYPES)
def test_contract_example_one_two_against_one_three(core, dtype):
    if dtype == "float8_e8m0fnu":  # powers of two only: [1, 2] vs [1, 4]
        got = core.compare(dtype, pack(dtype, [1.0, 2.0]), pack(dtype, [1.0, 4.0]))
        assert got == (1, 1, 2.0, 1.0, 2.0 / math.sqrt(5.0))
        return
    baseline, candidate = pack(dtype, [1.0, 2.0]), pack(dtype, [1.0, 3.0])
    expected = (1, 1, 1.0, 0.5, math.sqrt(1.0) / math.sqrt(5.0))
    assert core.compare(dtype, baseline, candidate) == pytest.approx(expected)
    assert core.compare(dtype, baseline, candidate, rtol=1e-4, atol=1e-6) == pytest.approx(expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_signed_zeros_differ_exactly_but_are_close(core, dtype):
    baseline, candidate = pack(dtype, [1.0, -0.0]), pack(dtype, [1.0, 0.0])
    assert core.compare(dtype, baseline, candidate) == (1, 1, 0.0, 0.0, 0.0)
    assert core.compare(dtype, baseline, candidate, rtol=0.0, atol=0.0) == (-1, 0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_signed_zero_components_differ_exactly_but_are_close(core, dtype):
    baseline = pack(dtype, [complex(1.0, 0.0)])
    candidate = pack(dtype, [complex(1.0, -0.0)])
    assert core.compare(dtype, baseline, candidate)[:2] == (0, 1)
    assert core.compare(dtype, baseline, candidate, rtol=0.0, atol=0.0)[:2] == (-1, 0)


NAN_PAYLOADS = {
    "float16": ("<H", 0x7E00, 0x7E01),
    "bfloat16": ("<H", 0x7FC0, 0x7FC1),
    "float32": ("<I", 0x7FC00000, 0x7FC00001),
    "float64": ("<Q", 0x7FF8000000000000, 0x7FF8000000000001),
}


@pytest.mark.parametrize("dtype", list(NAN_PAYLOADS))
def test_nan_payloads(core, dtype):
    fmt, quiet, other = NAN_PAYLOADS[dtype]
    nan = struct.pack(fmt, quiet)
    other_nan = struct.pack(fmt, other)
    # Exact: identical bits are equal; another payload is a mismatch with no finite error.
    assert core.compare(dtype, nan, nan) == (-1, 0, 0.0, 0.0, 0.0)
    assert core.compare(dtype, nan, other_nan) == (0, 1, INF, INF, 0.0)
    # Tolerance: NaN never equals NaN unless equal_nan, whatever the payloads.
    assert core.compare(dtype, nan, other_nan, rtol=0.1, atol=0.1)[:2] == (0, 1)
    assert core.compare(dtype, nan, other_nan, rtol=0.1, atol=0.1, equal_nan=True)[:2] == (-1, 0)
    # Byte-identical buffers have zero error even when their NaNs are not close.
    assert core.compare(dtype, nan, nan, rtol=0.1, atol=0.1) == (0, 1, 0.0, 0.0, 0.0)
    one = pack(dtype, [1.0])
    assert core.compare(dtype, nan, one, rtol=0.1, atol=0.1, equal_nan=True)[:2] == (0, 1)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64"])
def test_infinities(core, dtype):
    inf, minus_inf, big = pack(dtype, [INF]), pack(dtype, [-INF]), pack(dtype, [1024.0])
    for mode in ({}, {"rtol": 1.0, "atol": 1e30}):
        assert core.compare(dtype, inf, inf, **mode) == (-1, 0, 0.0, 0.0, 0.0)
        assert core.compare(dtype, inf, minus_inf, **mode)[:4] == (0, 1, INF, INF)
        assert core.compare(dtype, inf, big, **mode)[:4] == (0, 1, INF, INF)
        assert core.compare(dtype, big, inf, **mode)[:4] == (0, 1, INF, INF)
    # Finite elements still give finite errors beside an infinite one.
    assert core.compare(dtype, pack(dtype, [INF, 2.0]), pack(dtype, [-INF, 3.0]))[:4] == (
        0,
        2,
        1.0,
        0.5,
    )


def test_float32_subnormals(core):
    smallest, twice = struct.pack("<f", 1e-45), struct.pack("<I", 2)
    tiny = struct.unpack("<f", smallest)[0]
    assert tiny == 2.0**-149
    assert core.compare("float32", smallest, twice, rtol=0.0, atol=0.0) == (
        0,
        1,
        2.0**-149,
        1.0,
        1.0,
    )
    assert core.compare("float32", smallest, twice, rtol=0.0, atol=2.0**-149)[:2] == (-1, 0)
    assert core.compare("float16", struct.pack("<H", 1), b"\0\0")[2] == 2.0**-24
    assert core.compare("bfloat16", struct.pack("<H", 1), b"\0\0")[2] == 2.0**-133


def test_tolerance_is_relative_to_the_candidate_and_errors_to_the_baseline(core):
    # |a - b| = 1; atol + rtol * |b| is 1 only when b = 10 (rtol 0.1).
    assert core.compare(
        "float64", pack("float64", [9.0]), pack("float64", [10.0]), rtol=0.1, atol=0.0
    )[:2] == (-1, 0)
    got = core.compare(
        "float64", pack("float64", [10.0]), pack("float64", [9.0]), rtol=0.1, atol=0.0
    )
    assert got[:4] == (0, 1, 1.0, 0.1)


def test_relative_error_falls_back_to_absolute_error_at_zero_baseline(core):
    got = core.compare("float32", pack("float32", [0.0, 4.0]), pack("float32", [0.5, 5.0]))
    assert got == (0, 2, 1.0, 0.5, math.sqrt(0.25 + 1.0) / 4.0)


def test_relative_rms_error(core):
    dtype = "float64"
    assert core.compare(dtype, pack(dtype, [0.0, 0.0]), pack(dtype, [3.0, 4.0]))[4] == INF
    assert core.compare(dtype, pack(dtype, [3.0, 4.0]), pack(dtype, [0.0, 0.0]))[4] == 1.0
    # Only elements finite on both sides count, in numerator and denominator alike.
    got = core.compare(dtype, pack(dtype, [3.0, INF, 4.0]), pack(dtype, [3.0, 1.0, 4.0]))
    assert got == (1, 1, 0.0, 0.0, 0.0)
    got = core.compare(dtype, pack(dtype, [3.0, NAN, 4.0]), pack(dtype, [0.0, 1.0, 4.0]))
    assert got == (0, 2, 3.0, 1.0, 3.0 / 5.0)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_sums_of_squares_that_overflow_double_are_rescaled(core, dtype):
    # The squares (and, for the first pair, the difference) overflow double.
    baseline = pack(dtype, [1.7e308, 0.0, 1e300])
    candidate = pack(dtype, [-1.7e308, 0.0, 1e300])
    first, count, max_abs, max_rel, rms = core.compare(dtype, baseline, candidate)
    assert (first, count, max_abs, max_rel) == (0, 1, 0.0, 0.0)
    expected = 2 / math.hypot(1.0, 1e300 / 1.7e308)
    assert rms == pytest.approx(expected, rel=1e-12)
    # Overflow in the denominator only: a tiny ratio, not NaN.
    got = core.compare(dtype, pack(dtype, [1e300, 1.0]), pack(dtype, [1e300, 2.0]))
    assert got[4] == pytest.approx(1e-300, rel=1e-12)
    # Overflow in one chunk of several keeps the other chunks' contributions.
    values = [1.0] * (CHUNK_ELEMENTS + 3)
    changed = list(values)
    changed[0] = 2.0
    values[-1] = changed[-1] = 1e300
    got = core.compare(dtype, pack(dtype, values), pack(dtype, changed))
    assert got[:4] == (0, 1, 1.0, 1.0)
    assert got[4] == pytest.approx(1e-300, rel=1e-12)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
def test_integers_and_bool_stay_exact_under_tolerance(core, dtype):
    baseline, candidate = pack(dtype, [1, 0, 1]), pack(dtype, [1, 1, 1])
    for mode in ({}, {"rtol": 1.0, "atol": 100.0}, {"rtol": 1.0, "atol": 100.0, "equal_nan": True}):
        assert core.compare(dtype, baseline, candidate, **mode) == (
            1,
            1,
            1.0,
            1.0,
            1 / math.sqrt(2.0),
        )
        assert core.compare(dtype, baseline, baseline, **mode) == (-1, 0, 0.0, 0.0, 0.0)


def test_int64_magnitudes_use_float64_values(core):
    baseline = pack("int64", [2**62, -(2**63), 2**53 + 1])
    candidate = pack("int64", [-(2**62), 2**63 - 1, 2**53])
    first, count, max_abs, max_rel, rms = core.compare("int64", baseline, candidate)
    assert (first, count) == (0, 3)
    assert max_abs == 2.0**64  # -2^63 vs 2^63 - 1 (which converts to 2^63)
    assert max_rel == 2.0
    expected_rms = math.sqrt(2.0**126 + 2.0**128) / math.sqrt(2.0**124 + 2.0**126 + 2.0**106)
    assert rms == pytest.approx(expected_rms, rel=1e-12)
    assert core.compare("uint64", pack("uint64", [2**64 - 1]), pack("uint64", [0]))[2] == 2.0**64


def test_complex_tolerance_uses_the_modulus(core):
    baseline = pack("complex128", [complex(1.0, 1.0)])
    # The difference 0.3 + 0.4j has modulus 0.5.
    candidate = pack("complex128", [complex(0.7, 0.6)])
    assert core.compare("complex128", baseline, candidate, rtol=0.0, atol=0.5)[:2] == (-1, 0)
    assert core.compare("complex128", baseline, candidate, rtol=0.0, atol=0.49)[:2] == (0, 1)
    # atol + rtol * |candidate|: |0.7 + 0.6j| is about 0.922.
    assert core.compare("complex128", baseline, candidate, rtol=0.55, atol=0.0)[:2] == (-1, 0)
    assert core.compare("complex128", baseline, candidate, rtol=0.5, atol=0.0)[:2] == (0, 1)
    assert core.compare("complex128", baseline, candidate)[2:4] == (
        pytest.approx(0.5),
        pytest.approx(0.5 / math.sqrt(2.0)),
    )
    for dtype in COMPLEX_DTYPES:
        got = core.compare(dtype, pack(dtype, [complex(3.0, 4.0)]), pack(dtype, [0j]))
        assert got == (0, 1, 5.0, 1.0, 1.0)
    # A NaN in either component makes the element NaN.
    nan_real = pack("complex64", [complex(NAN, 1.0)])
    nan_imag = pack("complex64", [complex(1.0, NAN)])
    assert core.compare("complex64", nan_real, nan_imag, rtol=0.0, atol=0.0)[:2] == (0, 1)
    assert core.compare("complex64", nan_real, nan_imag, rtol=0.0, atol=0.0, equal_nan=True)[
        :2
    ] == (-1, 0)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_empty_and_single_element_buffers(core, dtype):
    for mode in ({}, {"rtol": 0.1, "atol": 0.1}):
        assert core.compare(dtype, b"", b"", **mode) == (-1, 0, 0.0, 0.0, 0.0)
    size = itemsize(dtype)
    one = bytes([1] + [0] * (size - 1))
    zero = bytes(size)
    assert core.compare(dtype, one, one) == (-1, 0, 0.0, 0.0, 0.0)
    assert core.compare(dtype, one, zero)[:2] == (0, 1)
    assert_same_result(core.compare(dtype, one, zero), reference(dtype, one, zero))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "complex128", "int16"])
def test_unaligned_buffers_give_the_same_result(core, dtype):
    rng = np.random.default_rng(7)
    count = CHUNK_ELEMENTS + 45
    baseline, candidate = random_pair(dtype, count, rng)
    for mode in ({}, {"rtol": 1e-3, "atol": 1e-5}):
        aligned = core.compare(dtype, baseline, candidate, **mode)
        for offset in range(1, 8):
            shifted_baseline = memoryview(bytes(offset) + baseline)[offset:]
            shifted_candidate = memoryview(bytes(8 - offset) + candidate)[8 - offset :]
            assert core.compare(dtype, shifted_baseline, shifted_candidate, **mode) == aligned


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "complex64", "uint8", "float64"])
def test_thread_count_does_not_change_the_result(core, dtype):
    rng = np.random.default_rng(11)
    count = 5 * CHUNK_ELEMENTS + 123
    baseline, candidate = random_pair(dtype, count, rng)
    for mode in ({}, {"rtol": 1e-3, "atol": 1e-5}, {"rtol": 0.0, "atol": 0.0, "equal_nan": True}):
        results = {
            threads: core.compare(dtype, baseline, candidate, threads=threads, **mode)
            for threads in (1, 2, 3, 8, 64)
        }
        assert len(set(results.values())) == 1, results
        assert results[1][1] > 0


def test_first_mismatch_is_the_earliest_across_chunks_and_threads(core):
    values = np.zeros(4 * CHUNK_ELEMENTS, dtype="<f4")
    changed = values.copy()
    changed[[3 * CHUNK_ELEMENTS + 5, CHUNK_ELEMENTS + 9, 2 * CHUNK_ELEMENTS]] = 1.0
    for threads in (1, 2, 4):
        for mode in ({}, {"rtol": 0.0, "atol": 0.5}):
            got = core.compare(
                "float32", values.tobytes(), changed.tobytes(), threads=threads, **mode
            )
            assert got[:2] == (CHUNK_ELEMENTS + 9, 3)


def test_accepts_any_contiguous_buffer(core, tmp_path):
    data = pack("float32", [1.0, 2.0, 3.0, 4.0])
    changed = pack("float32", [1.0, 2.0, 3.0, 5.0])
    expected = core.compare("float32", data, changed)
    assert expected[:2] == (3, 1)
    ctypes_array = (ctypes.c_char * len(data)).from_buffer_copy(data)
    path = tmp_path / "baseline.bin"
    path.write_bytes(data)
    with path.open("rb") as handle:
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    with mapped:
        for baseline in (
            bytearray(data),
            memoryview(data),
            array.array("f", [1, 2, 3, 4]),
            memoryview(ctypes_array).cast("B"),
            mapped,
            np.frombuffer(data, dtype="<f4"),
        ):
            assert core.compare("float32", baseline, changed) == expected


# ---- argument errors ----


def test_unknown_dtype_lists_the_supported_names(core):
    with pytest.raises(ValueError, match="unknown dtype 'float128'") as error:
        core.compare("float128", b"", b"")
    for name in ALL_DTYPES:
        assert name in str(error.value)


def test_length_errors_give_both_lengths(core):
    with pytest.raises(ValueError, match="same byte length, got 8 and 12 bytes"):
        core.compare("float32", bytes(8), bytes(12))
    with pytest.raises(ValueError, match="multiple of the float32 element size 4, got 6 and 6"):
        core.compare("float32", bytes(6), bytes(6))
    with pytest.raises(ValueError, match="complex128 element size 16"):
        core.compare("complex128", bytes(8), bytes(8))


@pytest.mark.parametrize(
    ("rtol", "atol"),
    [(-1.0, 0.0), (0.0, -1.0), (INF, 0.0), (0.0, INF), (NAN, 0.0), (0.0, NAN)],
)
def test_tolerance_must_be_finite_and_non_negative(core, rtol, atol):
    with pytest.raises(ValueError, match="rtol and atol must be finite and non-negative"):
        core.compare("float32", b"", b"", rtol=rtol, atol=atol)


def test_tolerance_needs_both_rtol_and_atol(core):
    for mode in ({"rtol": 0.1}, {"atol": 0.1}):
        with pytest.raises(ValueError, match="give both rtol and atol"):
            core.compare("float32", b"", b"", **mode)
    with pytest.raises(TypeError, match="rtol must be a real number or None, got str"):
        core.compare("float32", b"", b"", rtol="0.1", atol=0.1)


def test_bad_threads_and_equal_nan(core):
    for threads in (0, -1):
        with pytest.raises(ValueError, match=f"threads must be at least 1, got {threads}"):
            core.compare("float32", b"", b"", threads=threads)
    with pytest.raises(TypeError, match="equal_nan must be True or False, got int"):
        core.compare("float32", b"", b"", rtol=0.0, atol=0.0, equal_nan=1)


def test_non_buffers_and_non_contiguous_buffers_are_rejected(core):
    with pytest.raises(TypeError, match="baseline must support the buffer protocol.*got list"):
        core.compare("float32", [1.0], b"\0\0\0\0")
    with pytest.raises(TypeError, match="candidate must support the buffer protocol.*got str"):
        core.compare("float32", bytes(4), "abcd")
    strided = memoryview(bytes(16)).cast("I")[::2]
    with pytest.raises(ValueError, match="candidate must be a C-contiguous buffer"):
        core.compare("float32", bytes(8), strided)
