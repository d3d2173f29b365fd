"""audit_rank_arrays: per-rank int64 arrays from buffers and files, as a real run records them."""

from __future__ import annotations

import array
import inspect
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainparity._internal.coverage.audit import (
    AtLeastOnce,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    SampleAnomaly,
    SampleCoverageResult,
    SampleViolation,
    audit_rank_arrays,
    audit_rank_iterables,
)
from trainparity._internal.environment import environment_fingerprint
from trainparity.outcomes import Outcome

numpy = pytest.importorskip("numpy")


def assert_error(result: SampleCoverageResult, message: str) -> None:
    expected = SampleCoverageResult(
        Outcome.ERROR, result.policy, message, environment=environment_fingerprint()
    )
    assert result == expected


def test_signature():
    parameters = inspect.signature(audit_rank_arrays).parameters
    assert list(parameters) == [
        "rank_ids",
        "policy",
        "epoch",
        "workers",
        "max_examples",
        "evidence_path",
    ]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(parameters.values())[1:])


RANKS = st.dictionaries(st.integers(0, 5), st.lists(st.integers(-3, 12), max_size=8), max_size=4)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    RANKS,
    st.one_of(
        st.builds(ExactlyOnce, st.sets(st.integers(-3, 12), max_size=8).map(sorted)),
        st.builds(AtLeastOnce, st.just(range(0, 10))),
        st.just(NoCrossRankOverlap()),
        st.builds(ExpectedPadding, st.just(range(-3, 13, 3)), st.integers(0, 3)),
    ),
    st.integers(0, 4),
)
def test_arrays_audit_like_rank_iterables(tmp_path, per_rank, policy, epoch):
    arrays_path, iterables_path = tmp_path / "arrays.json", tmp_path / "iterables.json"
    from_arrays = audit_rank_arrays(
        {rank: numpy.asarray(ids, dtype=numpy.int64) for rank, ids in per_rank.items()},
        policy=policy,
        epoch=epoch,
        evidence_path=arrays_path,
    )
    from_iterables = audit_rank_iterables(
        {rank: [ids] for rank, ids in per_rank.items()},
        sample_id_extractor=list,
        policy=policy,
        epoch=epoch,
        evidence_path=iterables_path,
    )
    arrays_report = from_arrays.to_dict()
    iterables_report = from_iterables.to_dict()
    assert arrays_report.pop("evidence_path") == str(arrays_path)
    iterables_report.pop("evidence_path")
    assert arrays_report == iterables_report
    assert arrays_path.read_text() == iterables_path.read_text()


def test_every_kind_of_source(tmp_path):
    ids = numpy.random.default_rng(0).permutation(40)
    parts = numpy.array_split(ids, 6)
    numpy.save(tmp_path / "rank0.npy", parts[0])
    parts[1].astype("<i8").tofile(tmp_path / "rank1.bin")
    (tmp_path / "empty.bin").write_bytes(b"")
    sources = {
        0: tmp_path / "rank0.npy",
        1: str(tmp_path / "rank1.bin"),
        2: array.array("q", parts[2].tolist()),
        3: parts[3].tobytes(),
        4: memoryview(parts[4]),
        5: parts[5],
        6: tmp_path / "empty.bin",
        7: numpy.zeros(0, dtype=numpy.int64),
    }
    result = audit_rank_arrays(sources, policy=ExactlyOnce(range(40)))
    assert result.outcome == Outcome.PASS and result.total_observations == 40


def test_epoch_and_worker_arrays_reach_violations_and_anomalies(tmp_path):
    numpy.asarray([5, 6], dtype="<i8").tofile(tmp_path / "workers1.bin")
    result = audit_rank_arrays(
        {0: numpy.array([1, 2, 3]), 1: numpy.array([4, 2])},
        policy=ExactlyOnce(range(1, 5)),
        epoch={0: numpy.array([0, 0, 1]), 1: numpy.array([2, 3])},
        workers={0: numpy.array([-1, 0, -1]), 1: tmp_path / "workers1.bin"},
    )
    assert result.first_violation == SampleViolation(
        "cross_rank_overlap", "coverage.cross_rank_overlap", 2, 1, 6, 3, 1
    )
    assert result.anomaly_examples == (
        SampleAnomaly("cross_rank_overlap+repeated_id", 2, 2, (0, 1), (0, 6), (0, 3)),
    )


def test_first_means_rank_by_rank_then_position():
    result = audit_rank_arrays(
        {3: numpy.array([0, 9]), 1: numpy.array([1, 1])}, policy=ExactlyOnce(range(2))
    )
    assert result.first_violation == SampleViolation(
        "same_rank_duplicate", "coverage.same_rank_duplicate", 1, 1, None, 0, 1
    )


def test_evidence_from_files(tmp_path):
    numpy.save(tmp_path / "r0.npy", numpy.array([2, 0]))
    path = tmp_path / "evidence.json"
    audit_rank_arrays({0: tmp_path / "r0.npy"}, policy=AtLeastOnce(range(3)), evidence_path=path)
    evidence = json.loads(path.read_text())
    assert evidence["missing_ids"] == [1]
    assert evidence["traces"][1]["occurrences"] == [
        {"sample_id": 2, "rank": 0, "epoch": 0, "position": 0, "worker": None}
    ]


def test_unknown_universe_abstains_before_opening_files(tmp_path):
    result = audit_rank_arrays({0: tmp_path / "absent.bin"}, policy=ExactlyOnce(None))
    assert result.outcome == Outcome.ABSTAIN


@pytest.mark.parametrize(
    "rank_ids, message",
    [
        (
            {0: numpy.arange(3, dtype=numpy.int32)},
            "rank 0 IDs must hold int64 values, not buffer format 'i'; convert with "
            "numpy.asarray(ids, dtype=numpy.int64)",
        ),
        (
            {0: numpy.arange(3.0)},
            "rank 0 IDs must hold int64 values, not buffer format 'd'; convert with "
            "numpy.asarray(ids, dtype=numpy.int64)",
        ),
        (
            {0: numpy.zeros((2, 2), dtype=numpy.int64)},
            "rank 0 IDs must be one-dimensional, not of shape (2, 2)",
        ),
        (
            {0: numpy.arange(6)[::2]},
            "rank 0 IDs must be contiguous; pass numpy.ascontiguousarray(ids)",
        ),
        (
            {2: [1, 2]},
            "rank 2 IDs must be a buffer of int64 (numpy array, array.array('q'), bytes) or a file "
            "path, not list",
        ),
        ({0: b"1234567"}, "rank 0 IDs: 7 bytes are not a whole number of int64 values"),
        (
            {0: numpy.arange(3, dtype=numpy.uint8)},
            "rank 0 IDs must hold int64 values, not buffer format 'B'; convert with "
            "numpy.asarray(ids, dtype=numpy.int64)",
        ),
        ({-1: numpy.arange(3)}, "rank must be a non-negative integer"),
        ({True: numpy.arange(3)}, "rank must be a non-negative integer"),
    ],
)
def test_bad_arrays(rank_ids, message):
    assert_error(audit_rank_arrays(rank_ids, policy=AtLeastOnce(range(3))), message)


def test_bad_files(tmp_path):
    def audit(source):
        return audit_rank_arrays({1: source}, policy=AtLeastOnce(range(3))).message

    assert audit(tmp_path / "absent.bin").startswith(
        "rank 1 IDs could not be read: FileNotFoundError: [Errno 2]"
    )
    (tmp_path / "odd.bin").write_bytes(b"\x00" * 12)

    def where(name):
        return f"rank 1 IDs: {str(tmp_path / name)!r}"

    (tmp_path / "odd.bin").write_bytes(b"\x00" * 12)
    assert audit(tmp_path / "odd.bin") == (
        f"{where('odd.bin')} has 12 bytes, not a whole number of int64 values"
    )
    numpy.save(tmp_path / "int32.npy", numpy.arange(3, dtype=numpy.int32))
    assert audit(tmp_path / "int32.npy") == (
        f"{where('int32.npy')} must hold little-endian int64 ('<i8'), not '<i4'; save it with "
        "numpy.save(path, numpy.asarray(ids, dtype='<i8'))"
    )
    numpy.save(tmp_path / "big.npy", numpy.arange(3, dtype=">i8"))
    assert "not '>i8'" in audit(tmp_path / "big.npy")
    numpy.save(tmp_path / "square.npy", numpy.zeros((2, 2), dtype=numpy.int64))
    assert audit(tmp_path / "square.npy") == (
        f"{where('square.npy')} must be one-dimensional, not of shape (2, 2)"
    )
    numpy.save(tmp_path / "cut.npy", numpy.arange(4))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "cut.npy").read_bytes()[:-8])
    assert audit(tmp_path / "cut.npy") == (
        f"{where('cut.npy')} is truncated: its header promises 4 values"
    )
    (tmp_path / "fake.npy").write_bytes(b"\x00" * 16)
    assert (
        audit(tmp_path / "fake.npy") == f"{where('fake.npy')} is not a .npy file (no NUMPY magic)"
    )


def test_a_fifo_of_ids_is_an_error_instead_of_blocking_forever(tmp_path):
    os.mkfifo(tmp_path / "ids")
    result = audit_rank_arrays({0: tmp_path / "ids"}, policy=AtLeastOnce(range(3)))
    assert_error(
        result,
        f"rank 0 IDs: {str(tmp_path / 'ids')!r} is a FIFO, not a regular file; the IDs are "
        "memory-mapped: write them to a file",
    )


def test_damaged_npy_headers_are_errors_with_stable_messages(tmp_path):
    def audit(name, data):
        (tmp_path / name).write_bytes(data)
        return audit_rank_arrays({0: tmp_path / name}, policy=AtLeastOnce(range(3))).message

    def where(name):
        return f"rank 0 IDs: {str(tmp_path / name)!r}"

    def npy(header, major=1):
        text = header.encode("latin1")
        length = len(text).to_bytes(2 if major == 1 else 4, "little")
        return b"\x93NUMPY" + bytes([major, 0]) + length + text

    incomplete = "is truncated: its .npy header is incomplete"
    # a version-2 header cut inside its 4-byte length field raised struct.error
    assert audit("v2.npy", b"\x93NUMPY\x02\x00\x10\x00") == f"{where('v2.npy')} {incomplete}"
    assert audit("v1.npy", b"\x93NUMPY\x01\x00") == f"{where('v1.npy')} {incomplete}"
    assert audit("cut.npy", npy("{'descr': '<i8'}")[:-3]) == f"{where('cut.npy')} {incomplete}"
    assert audit("v9.npy", npy("{}", major=9)) == (
        f"{where('v9.npy')} has an unsupported .npy format version 9.0"
    )
    # the parser's message held an object address, so two reports of one file differed
    assert audit("name.npy", npy("{garbage}")) == (
        f"{where('name.npy')} has an unreadable .npy header (ValueError)"
    )
    assert audit("neg.npy", npy("{'descr': '<i8', 'fortran_order': False, 'shape': (-1,)}")) == (
        f"{where('neg.npy')} has an unreadable .npy header (shape (-1,))"
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"epoch": -1}, "epoch must be a non-negative integer"),
        ({"epoch": 1.5}, "epoch must be a non-negative integer"),
        (
            {"epoch": {0: numpy.array([0, 0, -2])}},
            "epoch must be a non-negative integer (rank 0, position 2)",
        ),
        (
            {"epoch": {0: numpy.array([0])}},
            "rank 0 has 1 epoch values for 3 IDs; give one value per ID",
        ),
        (
            {"epoch": {1: numpy.array([0, 0, 0])}},
            "epoch must give an array for exactly the ranks of rank_ids "
            "(missing ranks: [0], unknown ranks: [1])",
        ),
        (
            {"workers": {0: numpy.array([0, -2, 0])}},
            "worker must be -1 (unknown) or a non-negative integer (rank 0, position 1)",
        ),
        (
            {"workers": {0: numpy.array([0, 1, 2], dtype=numpy.int8)}},
            "rank 0 workers must hold int64 values, not buffer format 'b'; convert with "
            "numpy.asarray(ids, dtype=numpy.int64)",
        ),
        ({"max_examples": -1}, "max_examples must be a non-negative integer"),
    ],
)
def test_bad_epoch_and_worker_arrays(options, message):
    result = audit_rank_arrays({0: numpy.arange(3)}, policy=AtLeastOnce(range(3)), **options)
    assert_error(result, message)


def test_str_universes_cannot_match_int64_arrays():
    result = audit_rank_arrays({0: numpy.arange(3)}, policy=AtLeastOnce(("a",)))
    assert_error(
        result,
        "rank ID arrays hold int64 IDs, so the expected ID universe must hold int IDs inside int64",
    )


def test_unreadable_mapping():
    class Broken(dict):
        def items(self):
            raise OSError("gone")

    assert_error(
        audit_rank_arrays(Broken(), policy=NoCrossRankOverlap()),
        "rank IDs could not be read: OSError: gone",
    )
