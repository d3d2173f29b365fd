"""Sample coverage through the public API: contract scenarios, messages, evidence, quickstart."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from trainparity._internal.coverage import audit as sample_coverage
from trainparity._internal.coverage.audit import (
    AtLeastOnce,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    SampleAnomaly,
    SampleCoverageAuditor,
    SampleCoverageResult,
    SampleObservation,
    SampleViolation,
    audit_rank_iterables,
    audit_sample_coverage,
)
from trainparity._internal.environment import environment_fingerprint
from trainparity.outcomes import Outcome
from trainparity.version import MACHINE_REPORT_SCHEMA_VERSION, PACKAGE_VERSION

O = SampleObservation  # noqa: E741 - keeps the scenario tables readable

PACKAGE_DIR = Path(sample_coverage.__file__).parent


def counts(result: SampleCoverageResult) -> dict[str, object]:
    return {
        field.name: getattr(result, field.name)
        for field in dataclasses.fields(result)
        if field.name.endswith("_count")
        or field.name in ("total_observations", "unique_observed_ids")
    }


def assert_bare(result: SampleCoverageResult, outcome: Outcome, message: str) -> None:
    """ERROR and ABSTAIN results carry only outcome, policy, message and the environment."""
    assert (result.outcome, result.message) == (outcome, message)
    bare = SampleCoverageResult(
        outcome, result.policy, message, environment=environment_fingerprint()
    )
    assert result == bare


def explode():
    raise AssertionError("the observations must not be consumed")
    yield  # pragma: no cover - makes this a generator


# ------------------------------------------------------------------ surface


def test_signatures_match_the_contract():
    audit = inspect.signature(audit_sample_coverage).parameters
    assert list(audit) == ["observations", "policy", "max_examples", "evidence_path"]
    assert audit["max_examples"].kind is inspect.Parameter.KEYWORD_ONLY
    assert audit["max_examples"].default == 10 and audit["evidence_path"].default is None
    ranks = inspect.signature(audit_rank_iterables).parameters
    assert list(ranks) == [
        "rank_iterables",
        "sample_id_extractor",
        "policy",
        "epoch",
        "max_examples",
        "evidence_path",
    ]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(ranks.values())[1:])
    assert ranks["epoch"].default == 0


def test_policies_are_frozen_dataclasses_with_class_names_and_no_defaults():
    assert [f.name for f in dataclasses.fields(ExpectedPadding)] == [
        "expected_ids",
        "padding_count",
    ]
    assert dataclasses.fields(NoCrossRankOverlap) == ()
    names = [p.name for p in (ExactlyOnce, AtLeastOnce, NoCrossRankOverlap, ExpectedPadding)]
    assert names == ["exactly_once", "at_least_once", "no_cross_rank_overlap", "expected_padding"]
    with pytest.raises(TypeError):
        ExactlyOnce()  # type: ignore[call-arg]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ExactlyOnce(()).expected_ids = (1,)  # type: ignore[misc]


def test_result_and_record_fields_in_contract_order():
    # The contract's fields in its order, then ours: the environment fingerprint.
    assert [f.name for f in dataclasses.fields(SampleCoverageResult)] == [
        "outcome",
        "policy",
        "message",
        "total_observations",
        "unique_observed_ids",
        "expected_id_count",
        "missing_id_count",
        "unexpected_id_count",
        "repeated_id_count",
        "same_rank_duplicate_id_count",
        "cross_rank_overlap_id_count",
        "actual_padding_count",
        "expected_padding_count",
        "first_violation",
        "anomaly_examples",
        "evidence_path",
        "environment",
    ]
    assert [f.name for f in dataclasses.fields(SampleViolation)] == [
        "kind",
        "path",
        "sample_id",
        "rank",
        "worker",
        "epoch",
        "position",
    ]
    assert [f.name for f in dataclasses.fields(SampleAnomaly)] == [
        "kind",
        "sample_id",
        "occurrence_count",
        "ranks",
        "workers",
        "epochs",
    ]
    assert O(1, 0, 0, 0).worker is None


@pytest.mark.parametrize(
    "module", sorted(p.name for p in PACKAGE_DIR.glob("*.py") if "coverage" in p.name)
)
def test_coverage_modules_never_launch_processes_or_distributed_backends(module):
    source = (PACKAGE_DIR / module).read_text()
    for forbidden in ("subprocess", "init_process_group", "nccl", "#SBATCH"):
        assert forbidden not in source


# ------------------------------------------------------------------ scenarios


def test_same_rank_duplicate_fails_exactly_once_and_passes_no_cross_rank():
    observations = [O("a", 0, 0, 0), O("a", 0, 0, 1), O("b", 1, 0, 0)]
    strict = audit_sample_coverage(observations, ExactlyOnce(("a", "b")))
    assert strict.outcome == Outcome.FAIL and strict.message == "exactly_once policy was violated"
    assert strict.first_violation == SampleViolation(
        "same_rank_duplicate", "coverage.same_rank_duplicate", "a", 0, None, 0, 1
    )
    assert (strict.same_rank_duplicate_id_count, strict.cross_rank_overlap_id_count) == (1, 0)
    assert strict.anomaly_examples == (
        SampleAnomaly("repeated_id+same_rank_duplicate", "a", 2, (0,), (), (0,)),
    )
    relaxed = audit_sample_coverage(observations, NoCrossRankOverlap())
    assert relaxed.outcome == Outcome.PASS
    assert relaxed.message == "no sample ID was observed on more than one rank"
    assert relaxed.same_rank_duplicate_id_count == 1 and relaxed.expected_id_count is None


def test_cross_rank_overlap_keeps_the_worker_and_is_deterministic():
    observations = [O(1, 0, 2, 0, 3), O(2, 1, 2, 0, 4), O(1, 1, 2, 1, 4)]
    first = audit_sample_coverage(observations, NoCrossRankOverlap())
    assert first.to_dict() == audit_sample_coverage(observations, NoCrossRankOverlap()).to_dict()
    assert first.outcome == Outcome.FAIL and first.cross_rank_overlap_id_count == 1
    assert first.first_violation == SampleViolation(
        "cross_rank_overlap", "coverage.cross_rank_overlap", 1, 1, 4, 2, 1
    )
    assert first.anomaly_examples == (
        SampleAnomaly("cross_rank_overlap+repeated_id", 1, 2, (0, 1), (3, 4), (2,)),
    )


def test_at_least_once_counts_repeats_and_fails_on_unexpected_ids():
    repeats = [O(0, 0, 0, 0), O(0, 1, 0, 0), O(1, 0, 0, 1)]
    passed = audit_sample_coverage(repeats, AtLeastOnce(range(2)))
    assert passed.outcome == Outcome.PASS
    assert passed.message == "every expected sample ID was observed at least once"
    assert (passed.repeated_id_count, passed.cross_rank_overlap_id_count) == (1, 1)
    unexpected = audit_sample_coverage([O(0, 0, 0, 0), O(9, 0, 0, 1)], AtLeastOnce((0,)))
    assert unexpected.unexpected_id_count == 1
    assert unexpected.first_violation == SampleViolation(
        "unexpected_id", "coverage.unexpected_ids", 9, 0, None, 0, 1
    )
    missing = audit_sample_coverage([O(i, 0, 0, i) for i in range(4)], AtLeastOnce(range(5)))
    assert missing.first_violation == SampleViolation(
        "missing_id", "coverage.missing_ids", 4, None, None, None, None
    )


def test_expected_padding_compares_the_declared_count():
    observations = [O(0, 0, 0, 0), O(0, 1, 0, 0), O(1, 1, 0, 1)]
    mismatch = audit_sample_coverage(observations, ExpectedPadding((0, 1), padding_count=2))
    assert mismatch.outcome == Outcome.FAIL
    assert (mismatch.actual_padding_count, mismatch.expected_padding_count) == (1, 2)
    assert mismatch.first_violation == SampleViolation(
        "padding_count", "coverage.actual_padding_count", None, None, None, None, None
    )
    matched = audit_sample_coverage(observations, ExpectedPadding((0, 1), padding_count=1))
    assert matched.outcome == Outcome.PASS
    assert matched.message == "observed repetitions match the declared padding policy"


def test_padding_counts_only_repeats_of_expected_ids():
    observations = [O(0, 0, 0, 0), O(0, 0, 0, 1), O(7, 0, 0, 2), O(7, 1, 0, 0)]
    result = audit_sample_coverage(observations, ExpectedPadding((0,), padding_count=1))
    assert result.actual_padding_count == 1 and result.unexpected_id_count == 1
    assert result.first_violation.kind == "unexpected_id"


def test_resume_cursor_replaying_a_sample():
    observations = [O(i, 0, 0, i) for i in range(3)] + [O(2, 0, 0, 3), O(3, 0, 0, 4)]
    result = audit_sample_coverage(observations, ExactlyOnce(range(4)))
    assert result.first_violation.sample_id == 2 and result.first_violation.position == 3


@pytest.mark.parametrize("policy", [ExactlyOnce(None), AtLeastOnce(None), ExpectedPadding(None, 0)])
def test_unknown_universe_abstains_without_consuming_observations(policy):
    result = audit_sample_coverage(explode(), policy)
    assert_bare(
        result,
        Outcome.ABSTAIN,
        "a reliable finite expected ID universe is required for this policy",
    )
    assert result.total_observations == 0


def test_empty_universe_is_a_finite_contract():
    result = audit_sample_coverage([], ExactlyOnce(()))
    assert result.outcome == Outcome.PASS and result.expected_id_count == 0
    assert result.message == "every expected sample ID was observed exactly once"


def test_zero_and_string_zero_are_different_ids_and_max_examples_zero_hides_examples():
    result = audit_sample_coverage(
        [O("0", 0, 0, 0), O("0", 0, 0, 1)], ExactlyOnce(("0", "x")), max_examples=0
    )
    assert result.outcome == Outcome.FAIL and result.anomaly_examples == ()
    ints = audit_sample_coverage([O("0", 0, 0, 0)], ExactlyOnce((0,)))
    assert ints.first_violation.kind == "unexpected_id" and ints.missing_id_count == 1


def test_observed_ids_may_mix_ints_and_strs_ints_first():
    observations = [O("b", 0, 0, 0), O(10, 0, 0, 1), O("a", 1, 0, 0), O(9, 1, 0, 1), O(9, 0, 0, 2)]
    result = audit_sample_coverage(observations, AtLeastOnce(("a", "b", "c")))
    assert [a.sample_id for a in result.anomaly_examples] == [9, 10, "c"]


def test_ids_beyond_int64_are_ordinary_ints():
    huge = 2**70
    observations = [O(huge, 0, 0, 0), O(-huge, 0, 0, 1), O(3, 0, 0, 2), O(huge, 1, 0, 0)]
    result = audit_sample_coverage(observations, AtLeastOnce((huge, -huge, 3, 4)))
    assert [a.sample_id for a in result.anomaly_examples] == [4, huge]
    assert result.first_violation.sample_id == 4


def test_integer_arrays_are_accepted_as_universes():
    numpy = pytest.importorskip("numpy")
    observations = [O(i, 0, 0, i) for i in (4, 2, 0)]
    assert audit_sample_coverage(observations, ExactlyOnce(numpy.arange(0, 6, 2))).outcome == "PASS"
    result = audit_sample_coverage(
        observations, ExactlyOnce(numpy.array([4, 0, 3, 2], dtype=numpy.int16))
    )
    assert result.first_violation.sample_id == 3
    duplicated = audit_sample_coverage([], ExactlyOnce(numpy.array([1, 1])))
    assert_bare(duplicated, Outcome.ERROR, "expected ID universe contains duplicate IDs")


def test_auditor_wraps_audit_rank_iterables():
    auditor = SampleCoverageAuditor[list[int]](lambda batch: batch, max_examples=1)
    result = auditor.audit({0: [[3, 2], [1, 0]]}, ExactlyOnce(range(4)), epoch=7)
    assert result.outcome == Outcome.PASS and result.total_observations == 4
    failed = auditor.audit({1: [[3, 3, 9]]}, ExactlyOnce(range(4)), epoch=7)
    assert len(failed.anomaly_examples) == 1
    assert failed.first_violation == SampleViolation(
        "same_rank_duplicate", "coverage.same_rank_duplicate", 3, 1, None, 7, 1
    )


def test_rank_iterables_count_positions_per_rank_across_batches():
    result = audit_rank_iterables(
        {2: [[5], [5, 6]], 0: [[6]]}, sample_id_extractor=list, policy=ExactlyOnce((5, 6))
    )
    # rank 0 comes first, so the repeat of 6 is on rank 2 at its third ID
    assert result.first_violation == SampleViolation(
        "same_rank_duplicate", "coverage.same_rank_duplicate", 5, 2, None, 0, 1
    )


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "observations, policy, message",
    [
        (
            [O(True, 0, 0, 0)],
            ExactlyOnce((1,)),
            "observed sample ID is unsupported; use int or str",
        ),
        (
            [O(None, 0, 0, 0)],
            ExactlyOnce((1,)),
            "observed sample ID is unsupported; use int or str",
        ),
        (
            [O(float("nan"), 0, 0, 0)],
            ExactlyOnce((1,)),
            "observed sample ID is unsupported; use int or str",
        ),
        ([O(0, -1, 0, 0)], ExactlyOnce((0,)), "rank must be a non-negative integer"),
        ([O(0, 1.5, 0, 0)], ExactlyOnce((0,)), "rank must be a non-negative integer"),
        ([O(0, 2**63, 0, 0)], ExactlyOnce((0,)), "rank must be a non-negative integer below 2**63"),
        ([O(0, 0, "0", 0)], ExactlyOnce((0,)), "epoch must be a non-negative integer"),
        ([O(0, 0, 0, None)], ExactlyOnce((0,)), "position must be a non-negative integer"),
        ([O(0, 0, 0, float("nan"))], ExactlyOnce((0,)), "position must be a non-negative integer"),
        ([O(0, 0, 0, 0, -1)], ExactlyOnce((0,)), "worker must be None or a non-negative integer"),
        ([O(0, 0, 0, 0, 2.0)], ExactlyOnce((0,)), "worker must be None or a non-negative integer"),
        ([O(0, 0, 0, 0, True)], ExactlyOnce((0,)), "worker must be None or a non-negative integer"),
        ([(0, 0, 0, 0)], ExactlyOnce((0,)), "observations must be SampleObservation values"),
        ([], ExactlyOnce((0, 0)), "expected ID universe contains duplicate IDs"),
        ([], ExactlyOnce(("a", "a")), "expected ID universe contains duplicate IDs"),
        (
            [],
            ExactlyOnce((0, "0")),
            "expected ID universe mixes int and str IDs; use only int or only str IDs",
        ),
        (
            [],
            ExactlyOnce((0, None)),
            "expected ID universe contains an unsupported ID; use int or str",
        ),
        (
            [],
            ExactlyOnce((False,)),
            "expected ID universe contains an unsupported ID; use int or str",
        ),
        (
            [],
            AtLeastOnce((0, float("nan"))),
            "expected ID universe contains an unsupported ID; use int or str",
        ),
        ([], ExpectedPadding((), -1), "padding_count must be a non-negative integer"),
        ([], ExpectedPadding((), 1.5), "padding_count must be a non-negative integer"),
        ([], ExpectedPadding((), "2"), "padding_count must be a non-negative integer"),
        ([], ExpectedPadding((), True), "padding_count must be a non-negative integer"),
        ([], object(), "unsupported sample-coverage policy"),
    ],
)
def test_bad_input_gives_an_error_result(observations, policy, message):
    assert_bare(audit_sample_coverage(observations, policy), Outcome.ERROR, message)


def test_the_first_invalid_observation_decides():
    observations = [O(0, 0, 0, 0), O(1, 0, -1, 0), O(True, -1, 0, 0)]
    result = audit_sample_coverage(observations, ExactlyOnce((0, 1)))
    assert result.message == "epoch must be a non-negative integer"


@pytest.mark.parametrize("max_examples", [True, -1, 1.5, "10", None, float("nan")])
def test_max_examples_must_be_a_non_negative_int(max_examples):
    result = audit_sample_coverage([], ExactlyOnce(()), max_examples=max_examples)
    assert_bare(result, Outcome.ERROR, "max_examples must be a non-negative integer")


def test_policy_name_of_unsupported_policies():
    class Named:
        name = "mine"

    assert audit_sample_coverage([], Named()).policy == "mine"
    assert audit_sample_coverage([], object()).policy == "unsupported"


def test_read_failures_name_the_exception_type_only():
    def failing(error):
        raise error
        yield  # pragma: no cover

    universe = audit_sample_coverage([], ExactlyOnce(failing(RuntimeError("secret"))))
    assert_bare(universe, Outcome.ERROR, "expected ID universe could not be read: RuntimeError")
    observations = audit_sample_coverage(failing(ValueError("secret")), ExactlyOnce(()))
    assert_bare(observations, Outcome.ERROR, "observations could not be read: ValueError")


def test_evidence_path_must_be_a_path():
    result = audit_sample_coverage([], ExactlyOnce(()), evidence_path=3)  # type: ignore[arg-type]
    assert_bare(result, Outcome.ERROR, "evidence_path must be None, a str or an os.PathLike path")


class Batches:
    """An iterable whose iteration fails at batch `fail_at` (or never)."""

    def __init__(self, batches, fail_at=None, error=None):
        self.batches, self.fail_at, self.error = batches, fail_at, error

    def __iter__(self):
        for index, batch in enumerate(self.batches):
            if index == self.fail_at:
                raise self.error
            yield batch
        if self.fail_at == len(self.batches):
            raise self.error


def yield_then_fail():
    yield 0
    raise LookupError("sample ID stream failed")


def raise_runtime(batch):
    raise RuntimeError("private failure details")


def raise_value(batch):
    raise ValueError("cannot decode sample IDs")


@pytest.mark.parametrize(
    "rank_iterables, extractor, message",
    [
        (
            {0: [object()]},
            raise_runtime,
            "sample ID extraction failed at rank 0 batch 0: RuntimeError: private failure details",
        ),
        (
            {0: [object()]},
            lambda batch: "secret",
            "sample_id_extractor must return an iterable of IDs at rank 0 batch 0",
        ),
        (
            {0: [object()]},
            lambda batch: b"secret",
            "sample_id_extractor must return an iterable of IDs at rank 0 batch 0",
        ),
        (
            {0: [object()]},
            lambda batch: 7,
            "sample ID extraction output failed at rank 0 batch 0: "
            "TypeError: 'int' object is not iterable",
        ),
        (
            {0: Batches([[0]], 0, TypeError("batch transform is missing"))},
            list,
            "rank 0 batch 0 iteration failed: TypeError: batch transform is missing",
        ),
        (
            {3: Batches([[10, 11], [12]], 2, RuntimeError("third batch failed"))},
            list,
            "rank 3 batch 2 iteration failed: RuntimeError: third batch failed",
        ),
        (
            {2: [[0], [1]]},
            raise_value,
            "sample ID extraction failed at rank 2 batch 0: ValueError: cannot decode sample IDs",
        ),
        (
            {4: [object()]},
            lambda batch: yield_then_fail(),
            "sample ID extraction output failed at rank 4 batch 0: "
            "LookupError: sample ID stream failed",
        ),
        ({0: 5}, list, "rank 0 batch 0 iteration failed: TypeError: 'int' object is not iterable"),
        ({True: [[0]]}, list, "rank must be a non-negative integer"),
        ({-1: [[0]]}, list, "rank must be a non-negative integer"),
        ({"0": [[0]]}, list, "rank must be a non-negative integer"),
        ({0: [[0]], 1.0: [[1]]}, list, "rank must be a non-negative integer"),
        ({0: [[True]]}, list, "observed sample ID is unsupported; use int or str"),
    ],
)
def test_rank_iterable_failures_are_errors_naming_rank_and_batch(
    rank_iterables, extractor, message
):
    result = audit_rank_iterables(
        rank_iterables, sample_id_extractor=extractor, policy=AtLeastOnce((10, 11, 12))
    )
    assert_bare(result, Outcome.ERROR, message)
    assert "Traceback" not in result.message


def test_rank_keys_are_checked_before_any_iteration():
    result = audit_rank_iterables(
        {0: Batches([], 0, AssertionError("iterated")), -2: []},
        sample_id_extractor=list,
        policy=ExactlyOnce(()),
    )
    assert result.message == "rank must be a non-negative integer"


def test_unreadable_rank_mapping():
    class Broken(dict):
        def items(self):
            raise KeyError("gone")

    result = audit_rank_iterables(Broken(), sample_id_extractor=list, policy=ExactlyOnce(()))
    assert_bare(result, Outcome.ERROR, "rank iterables could not be read: KeyError: 'gone'")


@pytest.mark.parametrize("epoch", [-1, 1.5, "0", None, True])
def test_rank_iterables_epoch_must_be_a_non_negative_int(epoch):
    for batches in ([[0]], []):
        result = audit_rank_iterables(
            {0: batches}, sample_id_extractor=list, policy=AtLeastOnce((0,)), epoch=epoch
        )
        assert_bare(result, Outcome.ERROR, "epoch must be a non-negative integer")


def test_rank_iterables_id_of_the_first_observation_is_checked_before_the_epoch():
    result = audit_rank_iterables(
        {0: [[None, 0]]}, sample_id_extractor=list, policy=AtLeastOnce((0,)), epoch=-1
    )
    assert result.message == "observed sample ID is unsupported; use int or str"


def test_policy_is_checked_after_iterating_rank_iterables():
    result = audit_rank_iterables(
        {0: Batches([], 0, RuntimeError("boom"))}, sample_id_extractor=list, policy=object()
    )
    assert result.message == "rank 0 batch 0 iteration failed: RuntimeError: boom"


# ------------------------------------------------------------------ deliberate differences


def test_ids_are_ordered_numerically_not_as_text():
    result = audit_sample_coverage([], ExactlyOnce(range(20)), max_examples=3)
    assert [anomaly.sample_id for anomaly in result.anomaly_examples] == [0, 1, 2]
    assert result.missing_id_count == 20
    first_missing = audit_sample_coverage(
        [O(i, 0, 0, i) for i in range(2, 12)], ExactlyOnce(range(12))
    )
    assert first_missing.first_violation.sample_id == 0


def test_earlier_uses_the_true_input_index_even_for_identical_records():
    # The third record repeats the first one exactly; the unexpected ID (index 1) comes first.
    observations = [O(0, 0, 0, 0), O(5, 0, 0, 1), O(0, 0, 0, 0)]
    result = audit_sample_coverage(observations, ExactlyOnce((0,)))
    assert result.first_violation.kind == "unexpected_id"


# ------------------------------------------------------------------ evidence


def test_evidence_of_a_same_rank_duplicate(tmp_path):
    path = tmp_path / "nested" / "evidence.json"
    observations = [O(0, 0, 0, 0), O(0, 0, 0, 1), O(1, 1, 0, 0)]
    result = audit_sample_coverage(observations, ExactlyOnce(range(2)), evidence_path=path)
    assert result.evidence_path == str(path)
    text = path.read_text()
    evidence = json.loads(text)
    assert text == json.dumps(evidence, indent=2, sort_keys=True) + "\n"
    assert evidence["policy"] == "exactly_once" and evidence["expected_ids"] == [0, 1]
    assert evidence["repeated_ids"] == [{"sample_id": 0, "ranks": [0], "occurrence_count": 2}]
    assert evidence["same_rank_duplicates"] == [{"sample_id": 0, "rank": 0}]
    assert evidence["cross_rank_overlaps"] == [] and evidence["actual_padding_count"] == 1
    assert [trace["sample_id"] for trace in evidence["traces"]] == [0, 1]
    assert evidence["traces"][0]["occurrences"][1] == {
        "sample_id": 0,
        "rank": 0,
        "epoch": 0,
        "position": 1,
        "worker": None,
    }
    assert evidence["first_violation"] == dataclasses.asdict(result.first_violation)


def test_evidence_is_complete_whatever_max_examples(tmp_path):
    path = tmp_path / "evidence.json"
    result = audit_sample_coverage(
        [], ExactlyOnce(range(20)), max_examples=3, evidence_path=str(path)
    )
    assert len(result.anomaly_examples) == 3
    assert json.loads(path.read_text())["missing_ids"] == list(range(20))


def test_evidence_and_result_carry_the_report_metadata(tmp_path):
    path = tmp_path / "evidence.json"
    result = audit_sample_coverage(
        [O("sample-1", 0, 0, 0)], ExactlyOnce(("sample-1",)), evidence_path=path
    )
    payload = result.to_dict()
    evidence = json.loads(path.read_text())
    for document in (payload, evidence):
        assert document["schema_version"] == MACHINE_REPORT_SCHEMA_VERSION == 2
        assert document["trainparity_version"] == PACKAGE_VERSION
    assert list(payload)[:2] == ["schema_version", "trainparity_version"]
    assert payload["outcome"] == "PASS" and type(payload["outcome"]) is str
    assert evidence["traces"][0]["occurrences"][0]["worker"] is None


def test_results_and_evidence_carry_the_environment_and_no_other_variable(tmp_path, monkeypatch):
    secret = f"s3cr3t-{uuid.uuid4()}"
    monkeypatch.setenv("TRAINPARITY_TEST_TOKEN", secret)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    path = tmp_path / "evidence.json"
    failed = audit_sample_coverage([O(1, 0, 0, 0)], ExactlyOnce((0, 1)), evidence_path=path)
    errored = audit_sample_coverage([O(1, 0, 0, 0)], "not a policy")
    abstained = audit_sample_coverage([O(1, 0, 0, 0)], ExactlyOnce(None))
    evidence_text = path.read_text()
    for result in (failed, errored, abstained):
        assert result.environment == environment_fingerprint()
        assert result.environment["variables"]["OMP_NUM_THREADS"] == "3"
        report = json.dumps(result.to_dict())
        assert secret not in report and '"torch_intra_op"' in report
    assert json.loads(evidence_text)["environment"] == failed.environment
    assert secret not in evidence_text


def test_evidence_without_universe_has_null_expected_ids_and_counts_all_padding(tmp_path):
    path = tmp_path / "evidence.json"
    audit_sample_coverage([O(4, 0, 0, 0), O(4, 1, 0, 0)], NoCrossRankOverlap(), evidence_path=path)
    evidence = json.loads(path.read_text())
    assert evidence["expected_ids"] is None and evidence["actual_padding_count"] == 1
    assert evidence["cross_rank_overlaps"] == [{"sample_id": 4, "ranks": [0, 1]}]


def test_evidence_replaces_an_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "evidence.json"
    path.write_text("old")
    audit_sample_coverage([], ExactlyOnce(()), evidence_path=path)
    assert json.loads(path.read_text())["outcome"] == "PASS"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evidence.json"]


def test_unwritable_evidence_is_an_error_and_leaves_nothing_behind(tmp_path):
    directory = tmp_path / "taken"
    directory.mkdir()
    result = audit_sample_coverage([], ExactlyOnce(()), evidence_path=directory)
    assert_bare(result, Outcome.ERROR, "machine evidence could not be written: IsADirectoryError")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]
    (tmp_path / "file").write_text("")
    not_a_dir = audit_sample_coverage(
        [], ExactlyOnce(()), evidence_path=tmp_path / "file" / "e.json"
    )
    assert_bare(not_a_dir, Outcome.ERROR, "machine evidence could not be written: FileExistsError")


# ------------------------------------------------------------------ quickstart


def test_quickstart_payload():
    from trainparity.quickstarts import sample_coverage as quickstart

    payload = quickstart.run()
    assert payload["schema_version"] == 2 and payload["trainparity_version"] == PACKAGE_VERSION
    clean, fault = payload["clean"], payload["intentional_fail"]
    assert clean["outcome"] == "PASS" and clean["evidence_path"] is None
    assert clean["message"] == "every expected sample ID was observed exactly once"
    assert (clean["total_observations"], clean["unique_observed_ids"]) == (4, 4)
    assert clean["anomaly_examples"] == () and clean["actual_padding_count"] is None
    assert fault["outcome"] == "FAIL" and fault["message"] == "exactly_once policy was violated"
    assert fault["first_violation"] == {
        "kind": "same_rank_duplicate",
        "path": "coverage.same_rank_duplicate",
        "sample_id": 2,
        "rank": 0,
        "worker": None,
        "epoch": 0,
        "position": 3,
    }
    assert (fault["missing_id_count"], fault["repeated_id_count"]) == (1, 1)
    assert fault["anomaly_examples"] == (
        {
            "kind": "repeated_id+same_rank_duplicate",
            "sample_id": 2,
            "occurrence_count": 2,
            "ranks": (0,),
            "workers": (),
            "epochs": (0,),
        },
        {
            "kind": "missing_id",
            "sample_id": 3,
            "occurrence_count": 0,
            "ranks": (),
            "workers": (),
            "epochs": (),
        },
    )


def _quickstart(*options: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trainparity.quickstarts.sample_coverage", *options],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_quickstart_prints_its_verdicts_first_and_the_reports_under_json():
    # Issue 53, finding 5: two lines per case, not the JSON payload.
    completed = _quickstart()
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "clean: PASS  every expected sample ID was observed exactly once",
        "  policy exactly_once: 4 observations",
        "intentional_fail: FAIL  exactly_once policy was violated",
        "  coverage.same_rank_duplicate: sample 2 at rank 0, epoch 0, position 3",
        "as expected: the clean case passes and the intentional fault is caught (exit 0); "
        "--json prints both reports",
    ]


def test_quickstart_runs_as_a_module():
    completed = _quickstart("--json")
    assert completed.returncode == 0, completed.stderr
    payload = json.loads(completed.stdout)
    assert completed.stdout == json.dumps(payload, indent=2, sort_keys=True) + "\n"
    assert payload["intentional_fail"]["first_violation"]["path"] == "coverage.same_rank_duplicate"
