"""Diff of two snapshot files recorded anywhere: first divergence, per-tensor errors, environment leads."""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Any

from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    Difference,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity._internal.comparison.states import (
    TensorStatistics,
    checked_policy,
    compare_states_with_records,
)
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.reported import ReportedResult
from trainparity._internal.state.snapshot_file import read_snapshot
from trainparity._internal.state.tree_codec import SnapshotFileError
from trainparity._internal.why.environment_leads import EnvironmentLead, environment_leads

__all__ = ["SnapshotDiff", "diff_snapshots"]


@dataclass(frozen=True, repr=False)
class SnapshotDiff(ReportedResult):
    """How two recorded snapshots differ, and which environment differences could explain it.

    `differing_tensors` lists every tensor whose values differ, largest
    relative RMS error first; the two relative RMS summaries are taken over
    every tensor whose values were compared. `compared_by` is "values", or
    "digest" when either file holds digests only (then a differing tensor is
    known to differ, not by how much). `integrity` says how far the files'
    bytes were checked before the verdict: "verified" (every tensor's bytes
    against its recorded digest, and each manifest against its own digest) or
    "digests trusted" (`trust_digests=True`: the tensor bytes in the snapshot
    files were not checked, and equal digests were taken as equal values;
    ranges of checkpoint files that a snapshot refers to are verified all the
    same, since no one vouched for those files).
    """

    outcome: Outcome
    message: str
    baseline: str
    candidate: str
    comparison_policy: str = "exact"
    comparison_rtol: float | None = None
    comparison_atol: float | None = None
    comparison_equal_nan: bool | None = None
    compared_by: str = "values"
    integrity: str = "verified"
    primary_difference: Difference | None = None
    all_differences: tuple[Difference, ...] = ()
    compared_tensor_count: int = 0
    differing_tensors: tuple[TensorStatistics, ...] = ()
    median_relative_rms_error: float | None = None
    max_relative_rms_error: float | None = None
    environment_leads: tuple[EnvironmentLead, ...] = ()
    baseline_environment: dict[str, Any] | None = None
    candidate_environment: dict[str, Any] | None = None


def diff_snapshots(
    baseline: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    comparison: ComparisonPolicy | None = None,
    trust_digests: bool = False,
) -> SnapshotDiff:
    """Compare two snapshot files (the comparison's traversal, docs/compatibility.md, "Comparison"; `comparison=None` means exact).

    PASS: equivalent under the policy. FAIL: the first observed divergence
    (never a root cause). ABSTAIN: under a tolerance, only digests of the
    differing tensors were recorded, so closeness cannot be judged. ERROR: a
    file is missing, unreadable, damaged (its bytes no longer match its
    recorded digests) or not a snapshot, or a checkpoint it refers to is
    missing or changed after it was observed. Both files are verified before
    anything is compared, unless `trust_digests=True` vouches for them; the
    result's `integrity` says which. Raises TypeError for a comparison that
    is not ExactComparison/ToleranceComparison.
    """
    policy = checked_policy(comparison)
    fields: dict[str, Any] = {
        "baseline": os.fspath(baseline),
        "candidate": os.fspath(candidate),
        **policy_report_fields(policy),
        "integrity": "digests trusted" if trust_digests else "verified",
    }
    try:
        left, left_extras = read_snapshot(baseline, trust_digests=trust_digests)
        right, right_extras = read_snapshot(candidate, trust_digests=trust_digests)
    except (OSError, SnapshotFileError) as error:
        return SnapshotDiff(Outcome.ERROR, _unreadable(error), **fields)
    by_digest = not (left_extras["includes_values"] and right_extras["includes_values"])
    versions = (left_extras["digest_version"], right_extras["digest_version"])
    if by_digest and versions[0] != versions[1]:
        # Digests of different versions differ for equal bytes: comparing them would
        # report every tensor as changed.
        return SnapshotDiff(Outcome.ERROR, _mixed_digest_versions(*versions), **fields)
    state, records = compare_states_with_records(left, right, policy)
    errors = [record.values.relative_rms_error for record in records]
    # A tensor that differs by digest alone has an unknown error; a median or max
    # without it would understate the drift (0 while a tensor differs), so none is given.
    known_errors = (
        []
        if any(error is None for error in errors)
        else [error for error in errors if error is not None and not math.isnan(error)]
    )
    undecidable = {
        record.path
        for record in records
        if record.values.mismatch_count is None and isinstance(policy, ToleranceComparison)
    }
    decisive = [item for item in state.differences if item.path not in undecidable]
    outcome, message = _verdict(state.differences, decisive, undecidable, by_digest)
    return SnapshotDiff(
        outcome=outcome,
        message=message,
        **fields,
        compared_by="digest" if by_digest else "values",
        primary_difference=decisive[0] if decisive else None,
        all_differences=state.differences,
        compared_tensor_count=len(records),
        differing_tensors=state.worst_tensors(len(records)),
        median_relative_rms_error=statistics.median(known_errors) if known_errors else None,
        max_relative_rms_error=max(known_errors) if known_errors else None,
        environment_leads=environment_leads(
            left_extras["environment"], right_extras["environment"]
        ),
        baseline_environment=left_extras["environment"],
        candidate_environment=right_extras["environment"],
    )


def _mixed_digest_versions(baseline_version: object, candidate_version: object) -> str:
    return (
        f"the snapshots' digests were computed by different digest versions "
        f"({baseline_version} and {candidate_version}) and at least one snapshot holds digests "
        "only, so they cannot be compared; record both snapshots with values, or with one "
        "trainparity version"
    )


def _unreadable(error: Exception) -> str:
    if isinstance(error, SnapshotFileError):
        return str(error)
    name = getattr(error, "filename", None)
    return f"snapshot file {name} could not be opened: {error.strerror or error}; check the path"


def _verdict(
    differences: tuple[Difference, ...],
    decisive: list[Difference],
    undecidable: set[str],
    by_digest: bool,
) -> tuple[Outcome, str]:
    suffix = " (compared by digest: values were not recorded)" if by_digest else ""
    if decisive:
        first = decisive[0]
        return Outcome.FAIL, f"first observed divergence at {first.path}: {first.reason}{suffix}"
    if differences:
        return (
            Outcome.ABSTAIN,
            f"{len(undecidable)} tensor(s) cannot be judged under a tolerance from digests alone "
            "(their values were not recorded); record both snapshots with values",
        )
    return Outcome.PASS, f"snapshots are equivalent under policy{suffix}"
