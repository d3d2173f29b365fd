"""Sample coverage: do the stable sample IDs observed per rank satisfy a declared policy?"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

from trainparity._internal.coverage.analysis import Analysis, analyse
from trainparity._internal.coverage.arrays import RankArray, read_rank_arrays
from trainparity._internal.coverage.evidence import write_evidence
from trainparity._internal.coverage.ids import (
    ExpectedIds,
    Observed,
    core_input,
    count_message,
    is_count,
    read_expected_ids,
    read_observation_list,
    read_rank_id_lists,
)
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.reported import ReportedResult
from trainparity._internal.version import add_report_metadata

__all__ = [
    "AtLeastOnce",
    "CoveragePolicy",
    "ExactlyOnce",
    "ExpectedPadding",
    "NoCrossRankOverlap",
    "RankArray",
    "SampleAnomaly",
    "SampleCoverageAuditor",
    "SampleCoverageResult",
    "SampleObservation",
    "SampleViolation",
    "audit_rank_arrays",
    "audit_rank_iterables",
    "audit_sample_coverage",
]

B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class SampleObservation:
    """One consumption of a sample: its stable ID, rank, epoch, position on the rank, worker.

    worker=None means the worker is unknown (never treated as worker 0).
    """

    sample_id: int | str
    rank: int
    epoch: int
    position: int
    worker: int | None = None


@dataclass(frozen=True)
class SampleViolation:
    """The first violation found; rank/worker/epoch/position come from the offending observation."""

    kind: str
    path: str
    sample_id: int | str | None
    rank: int | None
    worker: int | None
    epoch: int | None
    position: int | None


@dataclass(frozen=True)
class SampleAnomaly:
    """An ID involved in any condition (missing, unexpected, repeated, same-rank, cross-rank)."""

    kind: str
    sample_id: int | str
    occurrence_count: int
    ranks: tuple[int, ...]
    workers: tuple[int, ...]
    epochs: tuple[int, ...]


@dataclass(frozen=True)
class ExactlyOnce:
    """Every expected ID observed exactly once over all ranks; no unexpected ID."""

    name: ClassVar[str] = "exactly_once"
    expected_ids: Iterable[int | str] | None


@dataclass(frozen=True)
class AtLeastOnce:
    """Every expected ID observed at least once; no unexpected ID (repeats counted, allowed)."""

    name: ClassVar[str] = "at_least_once"
    expected_ids: Iterable[int | str] | None


@dataclass(frozen=True)
class NoCrossRankOverlap:
    """No ID observed on more than one rank (same-rank repeats counted, allowed)."""

    name: ClassVar[str] = "no_cross_rank_overlap"


@dataclass(frozen=True)
class ExpectedPadding:
    """No missing or unexpected ID, and exactly `padding_count` repeated observations."""

    name: ClassVar[str] = "expected_padding"
    expected_ids: Iterable[int | str] | None
    padding_count: int


CoveragePolicy = ExactlyOnce | AtLeastOnce | NoCrossRankOverlap | ExpectedPadding
_POLICIES = (ExactlyOnce, AtLeastOnce, NoCrossRankOverlap, ExpectedPadding)

_MESSAGES = {
    "exactly_once": "every expected sample ID was observed exactly once",
    "at_least_once": "every expected sample ID was observed at least once",
    "no_cross_rank_overlap": "no sample ID was observed on more than one rank",
    "expected_padding": "observed repetitions match the declared padding policy",
}
_NO_UNIVERSE = "a reliable finite expected ID universe is required for this policy"


@dataclass(frozen=True, repr=False)
class SampleCoverageResult(ReportedResult):
    """Outcome of a coverage audit.

    ERROR/ABSTAIN carry only outcome, policy and message of the contract's
    fields; every result also carries `environment`, the fingerprint of the
    process that ran the audit (docs/environment.md).
    """

    outcome: Outcome
    policy: str
    message: str
    total_observations: int = 0
    unique_observed_ids: int = 0
    expected_id_count: int | None = None
    missing_id_count: int = 0
    unexpected_id_count: int = 0
    repeated_id_count: int = 0
    same_rank_duplicate_id_count: int = 0
    cross_rank_overlap_id_count: int = 0
    actual_padding_count: int | None = None
    expected_padding_count: int | None = None
    first_violation: SampleViolation | None = None
    anomaly_examples: tuple[SampleAnomaly, ...] = ()
    evidence_path: str | None = None
    environment: dict[str, Any] | None = None


def _policy_name(policy: object) -> str:
    name = getattr(policy, "name", None)
    return name if isinstance(name, str) else "unsupported"


def _stopped(outcome: Outcome, policy: object, message: str) -> SampleCoverageResult:
    return SampleCoverageResult(
        outcome=outcome,
        policy=_policy_name(policy),
        message=message,
        environment=environment_fingerprint(),
    )


def _result(
    policy: CoveragePolicy, analysis: Analysis, evidence_path: str | None
) -> SampleCoverageResult:
    violation = analysis.first_violation
    padded = isinstance(policy, ExpectedPadding)
    return SampleCoverageResult(
        outcome=Outcome.PASS if violation is None else Outcome.FAIL,
        policy=policy.name,
        message=_MESSAGES[policy.name]
        if violation is None
        else f"{policy.name} policy was violated",
        total_observations=analysis.total_observations,
        unique_observed_ids=analysis.unique_observed_ids,
        expected_id_count=analysis.expected_id_count,
        missing_id_count=analysis.missing_id_count,
        unexpected_id_count=analysis.unexpected_id_count,
        repeated_id_count=analysis.repeated_id_count,
        same_rank_duplicate_id_count=analysis.same_rank_duplicate_id_count,
        cross_rank_overlap_id_count=analysis.cross_rank_overlap_id_count,
        actual_padding_count=analysis.actual_padding_count if padded else None,
        expected_padding_count=policy.padding_count if padded else None,  # type: ignore[union-attr]
        first_violation=None if violation is None else SampleViolation(*violation),
        anomaly_examples=tuple(SampleAnomaly(*anomaly) for anomaly in analysis.anomaly_examples),
        evidence_path=evidence_path,
        environment=environment_fingerprint(),
    )


def _audit(
    read_observed: Callable[[ExpectedIds | None], Observed | str],
    policy: object,
    max_examples: object,
    evidence_path: object,
) -> SampleCoverageResult:
    """The audit's steps in order (docs/compatibility.md, "Sample coverage"); `read_observed` reads the input for its kind."""
    if not is_count(max_examples):
        return _stopped(Outcome.ERROR, policy, count_message("max_examples", max_examples))
    if evidence_path is not None and not isinstance(evidence_path, (str, os.PathLike)):
        return _stopped(
            Outcome.ERROR, policy, "evidence_path must be None, a str or an os.PathLike path"
        )
    if not isinstance(policy, _POLICIES):
        return _stopped(Outcome.ERROR, policy, "unsupported sample-coverage policy")
    if isinstance(policy, ExpectedPadding) and not is_count(policy.padding_count):
        return _stopped(Outcome.ERROR, policy, count_message("padding_count", policy.padding_count))
    expected: ExpectedIds | None = None
    if not isinstance(policy, NoCrossRankOverlap):
        if policy.expected_ids is not None:
            read = read_expected_ids(policy.expected_ids)
            if isinstance(read, str):
                return _stopped(Outcome.ERROR, policy, read)
            expected = read
        if expected is None:  # before the observations: an unbounded source is never consumed
            return _stopped(Outcome.ABSTAIN, policy, _NO_UNIVERSE)
    observed = read_observed(expected)
    if isinstance(observed, str):
        return _stopped(Outcome.ERROR, policy, observed)
    source = core_input(observed, expected)
    padding = policy.padding_count if isinstance(policy, ExpectedPadding) else None
    assert isinstance(max_examples, int)
    analysis = analyse(source, policy.name, padding, max_examples, evidence_path is not None)
    if evidence_path is None:
        return _result(policy, analysis, None)
    path = Path(evidence_path)  # type: ignore[arg-type]
    result = _result(policy, analysis, str(evidence_path))
    header = add_report_metadata(
        {
            "outcome": result.outcome.value,
            "policy": result.policy,
            "first_violation": None
            if result.first_violation is None
            else dataclasses.asdict(result.first_violation),
            "actual_padding_count": analysis.actual_padding_count,
            "environment": result.environment,
        }
    )
    assert analysis.details is not None
    try:
        write_evidence(path, header, source, analysis.details)
    except OSError as error:
        return _stopped(
            Outcome.ERROR, policy, f"machine evidence could not be written: {type(error).__name__}"
        )
    return result


def audit_sample_coverage(
    observations: Iterable[object],
    policy: object,
    *,
    max_examples: int = 10,
    evidence_path: Path | str | None = None,
) -> SampleCoverageResult:
    """Audits SampleObservation values against a coverage policy.

    Never raises for bad input: invalid arguments, policies, universes or
    observations give an ERROR result whose message says what to fix; an unknown
    universe (expected_ids=None) gives ABSTAIN for the policies that need one.
    With evidence_path, the complete evidence JSON is written there atomically.
    """
    return _audit(
        lambda expected: read_observation_list(observations, SampleObservation, expected),
        policy,
        max_examples,
        evidence_path,
    )


def _rank_keys_problem(ranks: Iterable[object]) -> str | None:
    for rank in ranks:
        if not is_count(rank):
            return count_message("rank", rank)
    return None


def _read_rank_iterables(
    items: list[tuple[int, Iterable[B]]],
    sample_id_extractor: Callable[[B], Iterable[int | str]],
) -> list[tuple[int, list[Any]]] | str:
    """Each rank's extracted IDs in consumption order, or the message of the first failure."""
    ids_by_rank: list[tuple[int, list[Any]]] = []
    for rank, iterable in sorted(items, key=lambda item: item[0]):
        ids: list[Any] = []
        batch = 0
        try:
            iterator = iter(iterable)
        except Exception as error:
            return f"rank {rank} batch {batch} iteration failed: {error_text(error)}"
        while True:
            try:
                value = next(iterator)
            except StopIteration:
                break
            except Exception as error:
                return f"rank {rank} batch {batch} iteration failed: {error_text(error)}"
            try:
                extracted = sample_id_extractor(value)
            except Exception as error:
                return (
                    f"sample ID extraction failed at rank {rank} batch {batch}: {error_text(error)}"
                )
            if isinstance(extracted, (str, bytes)):
                return (
                    "sample_id_extractor must return an iterable of IDs "
                    f"at rank {rank} batch {batch}"
                )
            try:
                ids.extend(extracted)
            except Exception as error:
                return (
                    f"sample ID extraction output failed at rank {rank} batch {batch}: "
                    f"{error_text(error)}"
                )
            batch += 1
        ids_by_rank.append((rank, ids))
    return ids_by_rank


def audit_rank_iterables(
    rank_iterables: Mapping[int, Iterable[B]],
    *,
    sample_id_extractor: Callable[[B], Iterable[int | str]],
    policy: CoveragePolicy,
    epoch: int = 0,
    max_examples: int = 10,
    evidence_path: Path | str | None = None,
) -> SampleCoverageResult:
    """Audits what each rank's iterable (DataLoader, sampler, ...) yields, batch by batch.

    Ranks are consumed in ascending order; sample_id_extractor turns each batch
    into its sample IDs; a rank's positions count its IDs from 0 across batches;
    workers are unknown (None). Failures while iterating or extracting give ERROR
    results naming the rank and batch.
    """
    try:
        items = list(rank_iterables.items())
    except Exception as error:
        return _stopped(
            Outcome.ERROR, policy, f"rank iterables could not be read: {error_text(error)}"
        )
    problem = _rank_keys_problem(rank for rank, _iterable in items)
    if problem is not None:
        return _stopped(Outcome.ERROR, policy, problem)
    ids_by_rank = _read_rank_iterables(items, sample_id_extractor)
    if isinstance(ids_by_rank, str):
        return _stopped(Outcome.ERROR, policy, ids_by_rank)
    return _audit(
        lambda expected: read_rank_id_lists(ids_by_rank, epoch, expected),
        policy,
        max_examples,
        evidence_path,
    )


def audit_rank_arrays(
    rank_ids: Mapping[int, RankArray],
    *,
    policy: CoveragePolicy,
    epoch: int | Mapping[int, RankArray] = 0,
    workers: Mapping[int, RankArray] | None = None,
    max_examples: int = 10,
    evidence_path: Path | str | None = None,
) -> SampleCoverageResult:
    """Audits the sample IDs each rank recorded during a real run, one int64 array per rank.

    rank_ids maps each rank to its IDs in consumption order: a buffer of int64
    (numpy array, array.array("q"), memoryview, bytes of native int64) or the path
    of a file holding them (a one-dimensional '<i8' .npy file, or any other file of
    raw little-endian int64; files are memory-mapped, not read into memory).
    epoch is the epoch of every ID, or per rank an array of one epoch per ID.
    workers optionally gives per rank an array of DataLoader worker IDs (-1 =
    unknown). A rank's positions are the indices into its array. Ranks are audited
    in ascending order, so "first" means rank by rank, then position.
    """
    try:
        items = list(rank_ids.items())
    except Exception as error:
        return _stopped(Outcome.ERROR, policy, f"rank IDs could not be read: {error_text(error)}")
    problem = _rank_keys_problem(rank for rank, _source in items)
    if problem is not None:
        return _stopped(Outcome.ERROR, policy, problem)
    arrays = sorted(items, key=lambda item: item[0])
    return _audit(
        lambda expected: read_rank_arrays(arrays, epoch, workers, expected),
        policy,
        max_examples,
        evidence_path,
    )


class SampleCoverageAuditor(Generic[B]):
    """audit_rank_iterables with a fixed extractor and max_examples."""

    def __init__(
        self, sample_id_extractor: Callable[[B], Iterable[int | str]], max_examples: int = 10
    ) -> None:
        self.sample_id_extractor = sample_id_extractor
        self.max_examples = max_examples

    def audit(
        self,
        rank_iterables: Mapping[int, Iterable[B]],
        policy: CoveragePolicy,
        *,
        epoch: int = 0,
        evidence_path: Path | str | None = None,
    ) -> SampleCoverageResult:
        return audit_rank_iterables(
            rank_iterables,
            sample_id_extractor=self.sample_id_extractor,
            policy=policy,
            epoch=epoch,
            max_examples=self.max_examples,
            evidence_path=evidence_path,
        )
