"""Malformed arguments for the core's coverage, compare and digest entry points (fuzzed, bounded).

Python validates what it hands to the core, but the core checks its own
arguments too: any buffer length, rank code, universe or option must end as a
result or TypeError/ValueError/OverflowError/BufferError, never a crash. This
file runs in the sanitize job (AddressSanitizer + UBSan), so an out-of-bounds
read or an overflow here stops the job. `make fuzz` runs it longer.
"""

from __future__ import annotations

import array

from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.budget import fuzz_settings, within_seconds

EXPECTED_ERRORS = (TypeError, ValueError, OverflowError, BufferError)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Small enough that no valid argument makes the core allocate much.
WORDS = st.lists(INT64, max_size=6).map(lambda values: array.array("q", values).tobytes())
ODD_BYTES = st.binary(max_size=20)
INTS = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]),
)
ODD_OBJECTS = st.sampled_from([None, True, 1.5, "x", [1], (1,), object()])
BUFFERS = st.one_of(
    WORDS,
    ODD_BYTES,
    WORDS.map(bytearray),
    WORDS.map(lambda data: memoryview(data)[1:]),  # misaligned
    st.lists(st.integers(0, 5), max_size=6).map(lambda values: array.array("I", values).tobytes()),
    st.lists(st.integers(0, 5), max_size=6).map(lambda values: array.array("d", values)),
)
COLUMNS = st.one_of(BUFFERS, INTS, ODD_OBJECTS)
SEGMENTS = st.lists(
    st.one_of(
        st.tuples(
            BUFFERS, COLUMNS, COLUMNS, st.one_of(st.none(), COLUMNS), st.one_of(st.none(), COLUMNS)
        ),
        st.tuples(BUFFERS, COLUMNS),
        ODD_OBJECTS,
    ),
    max_size=3,
)
UNIVERSES = st.one_of(
    st.none(),
    st.tuples(INTS, INTS, st.integers(-2, 50)),
    st.tuples(INTS, INTS),
    st.lists(INT64, max_size=6).map(lambda values: array.array("q", sorted(values)).tobytes()),
    BUFFERS,
    ODD_OBJECTS,
)


def _call(function, *arguments, **keywords):
    with within_seconds():
        try:
            return function(*arguments, **keywords)
        except EXPECTED_ERRORS:
            return None


@fuzz_settings(ci_examples=300)
@given(
    segments=st.one_of(SEGMENTS, ODD_OBJECTS),
    rank_count=st.one_of(st.integers(-1, 4), INTS, ODD_OBJECTS),
    universe=UNIVERSES,
    max_examples=st.one_of(st.integers(-1, 5), INTS),
    details=st.booleans(),
)
def test_coverage_analysis_with_malformed_segments(
    core, segments, rank_count, universe, max_examples, details
):
    _call(core.coverage_analyze, segments, rank_count, universe, max_examples, details)
    _call(core.coverage_trace_order, segments, rank_count)


@fuzz_settings(ci_examples=200)
@given(
    first=st.one_of(BUFFERS, ODD_OBJECTS),
    second=st.one_of(BUFFERS, ODD_OBJECTS),
    minimum=st.one_of(INTS, ODD_OBJECTS),
)
def test_coverage_helpers_with_malformed_buffers(core, first, second, minimum):
    _call(core.coverage_first_below, first, minimum)
    _call(core.coverage_sort_unique, first)
    _call(core.coverage_remap, first, second)
    _call(core.coverage_int64_from_buffer, first)


DTYPES = st.sampled_from(
    [
        "bool",
        "uint8",
        "int64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
        "int3",
        "",
        "float32\x00",
    ]
)
NUMBERS = st.one_of(st.none(), st.floats(), st.integers(-2, 2), ODD_OBJECTS)


@fuzz_settings(ci_examples=300)
@given(
    dtype=st.one_of(DTYPES, ODD_OBJECTS),
    baseline=st.one_of(BUFFERS, ODD_OBJECTS),
    candidate=st.one_of(BUFFERS, ODD_OBJECTS),
    rtol=NUMBERS,
    atol=NUMBERS,
    equal_nan=st.one_of(st.booleans(), ODD_OBJECTS),
    threads=st.one_of(st.integers(-1, 4), INTS, ODD_OBJECTS),
)
def test_compare_and_digest_with_malformed_arguments(
    core, dtype, baseline, candidate, rtol, atol, equal_nan, threads
):
    options = {"rtol": rtol, "atol": atol, "equal_nan": equal_nan, "threads": threads}
    _call(core.compare, dtype, baseline, candidate, **options)
    state = _call(core.compare_accumulate, dtype, baseline, candidate, None, **options)
    if state is not None:
        _call(core.compare_finish, state)
    _call(core.compare_finish, baseline)
    _call(core.digest, baseline, threads=threads)
