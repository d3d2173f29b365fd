"""Runs the native coverage audit and picks the first violation the way each policy defines it."""

from __future__ import annotations

from typing import Any, NamedTuple

from trainparity._internal.coverage.ids import CoreInput, example_limit
from trainparity._internal.native.core import core

# Labels of an anomaly's conditions, in the (alphabetical) order its kind joins them.
_LABELS = (
    (core.COVERAGE_CROSS_RANK, "cross_rank_overlap"),
    (core.COVERAGE_MISSING, "missing_id"),
    (core.COVERAGE_REPEATED, "repeated_id"),
    (core.COVERAGE_SAME_RANK, "same_rank_duplicate"),
    (core.COVERAGE_UNEXPECTED, "unexpected_id"),
)


class Violation(NamedTuple):
    """The fields of a SampleViolation."""

    kind: str
    path: str
    sample_id: int | str | None
    rank: int | None
    worker: int | None
    epoch: int | None
    position: int | None


class Anomaly(NamedTuple):
    """The fields of a SampleAnomaly."""

    kind: str
    sample_id: int | str
    occurrence_count: int
    ranks: tuple[int, ...]
    workers: tuple[int, ...]
    epochs: tuple[int, ...]


class Analysis(NamedTuple):
    """Counts, first violation and anomaly examples of one audit."""

    total_observations: int
    unique_observed_ids: int
    expected_id_count: int | None
    missing_id_count: int
    unexpected_id_count: int
    repeated_id_count: int
    same_rank_duplicate_id_count: int
    cross_rank_overlap_id_count: int
    actual_padding_count: int
    first_violation: Violation | None
    anomaly_examples: tuple[Anomaly, ...]
    details: dict[str, Any] | None  # the core's complete lists, for an evidence file


def anomaly_kind(flags: int) -> str:
    return "+".join(label for flag, label in _LABELS if flags & flag)


def _observed_violation(kind: str, path: str, row: tuple[int, ...], source: CoreInput) -> Violation:
    _index, key, rank_code, epoch, position, worker = row
    return Violation(
        kind,
        path,
        source.sample_id(key),
        source.rank_values[rank_code],
        None if worker < 0 else worker,
        epoch,
        position,
    )


def _first_violation(
    policy_name: str, raw: dict[str, Any], source: CoreInput, padding_declared: int | None
) -> Violation | None:
    """The coverage rules (docs/compatibility.md, "Sample coverage"), "earlier" meaning the smaller input index."""
    unexpected = raw["first_unexpected"]
    missing = raw["first_missing"]
    found: Violation | None = None
    if policy_name == "exactly_once":
        repeat = raw["first_repeat"]
        if unexpected is not None and (repeat is None or unexpected[0] <= repeat[0]):
            found = _observed_violation(
                "unexpected_id", "coverage.unexpected_ids", unexpected, source
            )
        elif repeat is not None:
            if raw["first_repeat_same_rank"]:
                kind, path = "same_rank_duplicate", "coverage.same_rank_duplicate"
            else:
                kind, path = "cross_rank_overlap", "coverage.cross_rank_overlap"
            found = _observed_violation(kind, path, repeat, source)
    elif policy_name == "no_cross_rank_overlap":
        cross = raw["first_cross"]
        if cross is not None:
            found = _observed_violation(
                "cross_rank_overlap", "coverage.cross_rank_overlap", cross, source
            )
        return found
    elif unexpected is not None:  # at_least_once, expected_padding
        found = _observed_violation("unexpected_id", "coverage.unexpected_ids", unexpected, source)
    if found is None and missing is not None:
        found = Violation(
            "missing_id", "coverage.missing_ids", source.sample_id(missing), None, None, None, None
        )
    if found is None and padding_declared is not None and raw["padding"] != padding_declared:
        found = Violation(
            "padding_count", "coverage.actual_padding_count", None, None, None, None, None
        )
    return found


def _anomaly(row: tuple[Any, ...], source: CoreInput) -> Anomaly:
    key, flags, count, rank_codes, workers, epochs = row
    ranks = tuple(sorted(source.rank_values[code] for code in rank_codes))
    return Anomaly(anomaly_kind(flags), source.sample_id(key), count, ranks, workers, epochs)


def analyse(
    source: CoreInput,
    policy_name: str,
    padding_declared: int | None,
    max_examples: int,
    want_details: bool,
) -> Analysis:
    """Audits `source`; padding_declared is ExpectedPadding's padding_count (else None)."""
    raw = core.coverage_analyze(
        source.segments,
        max(1, len(source.rank_values)),
        source.universe,
        example_limit(max_examples),
        want_details,
    )
    return Analysis(
        total_observations=source.total,
        unique_observed_ids=raw["unique"],
        expected_id_count=source.expected_count,
        missing_id_count=raw["missing"],
        unexpected_id_count=raw["unexpected"],
        repeated_id_count=raw["repeated"],
        same_rank_duplicate_id_count=raw["same_rank"],
        cross_rank_overlap_id_count=raw["cross_rank"],
        actual_padding_count=raw["padding"],
        first_violation=_first_violation(policy_name, raw, source, padding_declared),
        anomaly_examples=tuple(_anomaly(row, source) for row in raw["anomalies"]),
        details=raw if want_details else None,
    )
