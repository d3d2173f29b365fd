"""Sections of a sample-coverage audit: first violation, counts, anomalies.

A coverage audit reports which sample IDs were seen, missed or repeated across
ranks, workers and epochs; these sections show where coverage first broke,
the audit's totals and a few examples of each anomaly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainparity._internal.reports.sections.cells import Section, text_cell

__all__ = [
    "anomalies_section",
    "coverage_counts_section",
    "epochs_section",
    "first_violation_section",
]

_COVERAGE_COUNT_KEYS = (
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
)


def epochs_section(report: Mapping[str, Any]) -> Section | None:
    """Each audited epoch's verdict (`trainparity coverage --ids-dir`, which reports the first
    epoch not to pass in full)."""
    epochs = report.get("epochs")
    if not isinstance(epochs, Mapping) or not epochs:
        return None
    rows = tuple((str(epoch), str(outcome)) for epoch, outcome in epochs.items())
    return Section("Epochs", rows, ("epoch", "verdict"))


def first_violation_section(report: Mapping[str, Any]) -> Section | None:
    first = report.get("first_violation")
    if not isinstance(first, Mapping):
        return None
    keys = ("kind", "path", "sample_id", "rank", "worker", "epoch", "position")
    return Section(
        "First violation",
        tuple((key, text_cell(first.get(key))) for key in keys if key in first),
    )


def coverage_counts_section(report: Mapping[str, Any]) -> Section | None:
    if report.get("outcome") not in ("PASS", "FAIL"):
        return None  # an audit that stopped early counted nothing: its zeros mean nothing
    rows = tuple(
        (key.replace("_", " "), text_cell(report[key]))
        for key in _COVERAGE_COUNT_KEYS
        if report.get(key) is not None
    )
    return Section("Counts", rows) if rows else None


def anomalies_section(report: Mapping[str, Any]) -> Section | None:
    examples = report.get("anomaly_examples")
    if not examples:
        return None
    rows = tuple(
        (
            str(item["kind"]),
            text_cell(item["sample_id"]),
            str(item["occurrence_count"]),
            _joined(item["ranks"]),
            _joined(item["workers"]),
            _joined(item["epochs"]),
        )
        for item in examples
    )
    return Section(
        "Anomaly examples", rows, ("kind", "sample ID", "seen", "ranks", "workers", "epochs")
    )


def _joined(values: Sequence[Any]) -> str:
    return ", ".join(str(value) for value in values) if values else "-"
