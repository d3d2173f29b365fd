"""Fuzz the sample-ID readers of coverage: `.npy` and raw int64 files, and in-memory buffers.

`audit_rank_arrays` never raises for bad input (docs/api.md): every file or
buffer must end as a SampleCoverageResult, ERROR naming the problem when the
IDs cannot be read, and `trainparity coverage --ids` must exit 0, 1 or 3.
When our reader accepts a `.npy` file, NumPy must read the same IDs from it.
"""

from __future__ import annotations

import array
import struct

import numpy
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as numpy_strategies
from trainparity._internal.coverage.audit import (
    AtLeastOnce,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    audit_rank_arrays,
)
from trainparity.outcomes import Outcome

from tests.fuzz.budget import fuzz_settings, within_seconds
from tests.fuzz.checks import assert_well_formed_result, run_cli
from tests.fuzz.conftest import Seeds
from tests.fuzz.mutations import BYTE_EDITS, apply_edits

POLICIES = st.sampled_from(
    [
        ExactlyOnce(range(6)),
        AtLeastOnce(range(-3, 9, 3)),
        NoCrossRankOverlap(),
        ExpectedPadding(range(6), 1),
        ExactlyOnce(None),
    ]
)
INT64 = st.integers(-(2**63), 2**63 - 1)


def _numpy_ids(path) -> numpy.ndarray | None:
    """The IDs NumPy reads from a .npy file, or None when it cannot."""
    try:
        values = numpy.load(path, allow_pickle=False)
    except Exception:
        return None
    return values


def check_id_file(seeds: Seeds, data: bytes, suffix: str, policy) -> None:
    path = seeds.fresh_path(suffix)
    path.write_bytes(data)
    other = seeds.files["range.bin"]
    try:
        with within_seconds():
            result = audit_rank_arrays({0: path, 1: other}, policy=policy, max_examples=3)
            assert_well_formed_result(result)
            if result.outcome in (Outcome.PASS, Outcome.FAIL):
                if suffix == ".npy":
                    ids = _numpy_ids(path)
                    assert ids is not None, "we read a .npy file that NumPy cannot"
                    assert ids.ndim == 1 and ids.dtype == numpy.dtype("<i8"), ids.dtype
                    count = len(ids)
                else:
                    count = len(data) // 8
                assert result.total_observations == count + 6
            columns = audit_rank_arrays(
                {0: seeds.files["range.npy"]},
                policy=policy,
                epoch={0: path},
                workers={0: path},
            )
            assert_well_formed_result(columns)
            code, _, _ = run_cli(
                ["coverage", "--ids", f"0={path}", "--policy", "exactly_once", "--universe", "6"]
            )
            assert code in (0, 1, 3)
    finally:
        path.unlink()


@st.composite
def npy_files(draw) -> bytes:
    """A .npy file assembled from parts, most of them slightly wrong."""
    values = draw(st.lists(INT64, max_size=8))
    count = len(values)
    descr = draw(
        st.sampled_from(
            ["'<i8'", "'<q'", "'>i8'", "'|i1'", "'<f8'", "'<u8'", "'i8'", "None", "5", "'<i8"]
        )
    )
    fortran = draw(st.sampled_from(["False", "True", "0"]))
    shape = draw(
        st.sampled_from(
            [
                f"({count},)",
                f"({count}, )",
                "()",
                f"({count}, 1)",
                "(-1,)",
                f"({2**70},)",
                f"({2**61},)",
                "('x',)",
                f"[{count}]",
                f"{count}",
                "None",
                "(True,)",
                f"({count}.0,)",
                f"({count + 1},)",
                f"({max(count - 1, 0)},)",
            ]
        )
    )
    extra = draw(st.sampled_from(["", "'extra': 1, ", "'descr': '<f8', ", "**x, "]))
    text = "{" + f"'descr': {descr}, 'fortran_order': {fortran}, 'shape': {shape}, {extra}" + "}"
    form = draw(st.sampled_from(["dict", "dict", "dict", "random", "nested", "huge"]))
    if form == "random":
        text = draw(st.text(max_size=60))
    elif form == "nested":
        depth = draw(st.sampled_from([10, 200, 1000, 100_000]))
        text = "(" * depth + ")" * depth
    elif form == "huge":
        text = "{'descr': '<i8', 'fortran_order': False, 'shape': (" + "9" * 5000 + ",), }"
    major = draw(st.sampled_from([1, 1, 2, 3, 0, 4, 255]))
    header = text.encode("latin-1", errors="replace")
    header += b" " * (-(len(header) + 11) % 64) + b"\n"
    length_format, length_bits = ("<H", 16) if major == 1 else ("<I", 32)
    length = len(header)
    if draw(st.booleans()):
        length = draw(st.integers(0, 2**length_bits - 1))
    # A header too long for a version-1 field gets a wrapped (wrong) length, as a bad writer would.
    length_field = struct.pack(length_format, length % 2**length_bits)
    payload = struct.pack(f"<{count}q", *values)
    payload = draw(st.sampled_from([payload, payload[:-1], payload + b"\x00", b""]))
    return b"\x93NUMPY" + bytes([major, 0]) + length_field + header + payload


@fuzz_settings(ci_examples=250)
@given(file=npy_files(), policy=POLICIES)
def test_assembled_npy_files(id_seeds, file, policy):
    check_id_file(id_seeds, file, ".npy", policy)


@fuzz_settings(ci_examples=200)
@given(
    seed=st.sampled_from(["range.npy", "empty.npy", "extremes.npy", "v2.npy"]),
    edits=BYTE_EDITS,
    policy=POLICIES,
)
def test_byte_damaged_npy_files(id_seeds, seed, edits, policy):
    check_id_file(id_seeds, apply_edits(id_seeds.files[seed].read_bytes(), edits), ".npy", policy)


@fuzz_settings(ci_examples=100)
@given(
    data=st.one_of(
        st.binary(max_size=80),
        st.lists(INT64, max_size=9).map(lambda v: struct.pack(f"<{len(v)}q", *v)),
    ),
    suffix=st.sampled_from([".bin", "", ".NPY", ".npy.bin"]),
    policy=POLICIES,
)
def test_raw_files_of_any_length(id_seeds, data, suffix, policy):
    check_id_file(id_seeds, data, suffix, policy)


# In-memory buffers go to the native core as they are: every shape, dtype and layout.
_ARRAYS = numpy_strategies.arrays(
    dtype=st.one_of(
        numpy_strategies.integer_dtypes(endianness="="),
        numpy_strategies.integer_dtypes(endianness=">"),
        numpy_strategies.floating_dtypes(),
        st.just(numpy.dtype(bool)),
    ),
    shape=numpy_strategies.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
)
_BUFFERS = st.one_of(
    _ARRAYS,
    _ARRAYS.map(lambda values: values[::2] if values.ndim else values),  # non-contiguous
    _ARRAYS.map(lambda values: values.T),
    st.binary(max_size=40),
    st.binary(max_size=40).map(bytearray),
    st.binary(max_size=40).map(memoryview),
    st.builds(
        lambda code, values: array.array(code, [v % 100 for v in values]),
        st.sampled_from("bBhHiIlLqQ"),
        st.lists(st.integers(0, 99), max_size=6),
    ),
    st.lists(INT64, max_size=6).map(lambda values: memoryview(array.array("q", values))),
    st.lists(INT64, max_size=6).map(lambda values: memoryview(array.array("q", values)).cast("B")),
    st.sampled_from([None, 3, "missing-file-\x1b[2J", 1.5, [1, 2], {0: 1}, object()]),
)


@fuzz_settings(ci_examples=200)
@given(
    ids=_BUFFERS,
    epochs=st.one_of(st.none(), _BUFFERS),
    workers=st.one_of(st.none(), _BUFFERS),
    policy=POLICIES,
)
def test_in_memory_buffers(ids, epochs, workers, policy):
    with within_seconds():
        result = audit_rank_arrays(
            {0: ids, 2: numpy.arange(3)},
            policy=policy,
            epoch=0 if epochs is None else {0: epochs, 2: numpy.zeros(3, dtype=numpy.int64)},
            workers=None if workers is None else {0: workers, 2: numpy.full(3, -1)},
        )
        assert_well_formed_result(result)
        plain = isinstance(ids, numpy.ndarray) and ids.dtype == numpy.int64 and ids.ndim == 1
        plain = plain and ids.flags.c_contiguous
        if plain and epochs is None and workers is None:
            assert result.outcome is not Outcome.ERROR, result.message


def test_the_seeds_audit_cleanly(id_seeds):
    for name, path in id_seeds.files.items():
        result = audit_rank_arrays({0: path}, policy=NoCrossRankOverlap())
        assert result.outcome is Outcome.PASS, (name, result.message)
