"""audit_recorded_ids: every epoch of a record_ids directory (or of a resume chain's) against one coverage policy."""

from __future__ import annotations

import os
from pathlib import Path

from trainparity._internal.coverage.audit import (
    CoveragePolicy,
    SampleCoverageResult,
    audit_rank_arrays,
)
from trainparity._internal.coverage.fast_forward import after_fast_forward, phase_record
from trainparity._internal.recording.record_ids import recorded_epochs, recorded_ids

__all__ = ["audit_recorded_chain", "audit_recorded_ids"]


def audit_recorded_ids(
    directory: str | os.PathLike[str],
    *,
    policy: CoveragePolicy,
    epochs: list[int] | None = None,
    max_examples: int = 10,
    evidence_dir: str | os.PathLike[str] | None = None,
) -> dict[int, SampleCoverageResult]:
    """{epoch: result}: each recorded epoch (or each of `epochs`) is one window of `policy`.

    A policy describes one pass over the data, so every epoch is audited on
    its own, with the ranks that recorded IDs in it (a rank with no record
    file for an epoch contributed nothing to it). An epoch in `epochs` without
    records is audited as empty. `evidence_dir` receives
    `coverage-epoch{E}.json` per epoch.
    """
    found = recorded_epochs(directory)
    chosen = sorted(found) if epochs is None else sorted(set(epochs))
    results = {}
    for epoch in chosen:
        evidence = None
        if evidence_dir is not None:
            evidence = Path(evidence_dir) / f"coverage-epoch{epoch}.json"
        results[epoch] = audit_rank_arrays(
            recorded_ids(directory, epoch),
            policy=policy,
            epoch=epoch,
            max_examples=max_examples,
            evidence_path=evidence,
        )
    return results


def audit_recorded_chain(
    directories: list[str | os.PathLike[str]],
    *,
    policy: CoveragePolicy,
    epochs: list[int] | None = None,
    max_examples: int = 10,
) -> dict[int, SampleCoverageResult]:
    """{epoch: result} over the record directories of a resume chain's phases (A, B, C, …).

    Coverage is per epoch, across every phase: each rank's IDs of an epoch
    are its phases' records one after the other (positions count along
    them), so a sample that one phase consumed and a later phase consumed
    again is a repeat, and one that no phase consumed is missing. A later
    phase's record that begins with exactly the IDs the phases before it
    consumed, drawn to fast-forward its loader with no training step in
    between (coverage/fast_forward.py), counts without that replay. Phases
    may run on different numbers of ranks; rank R is every phase's rank R.
    """
    # A phase that recorded nothing (it resumed past the end) may have no directory at all.
    found = [
        recorded_epochs(directory) if Path(directory).is_dir() else {} for directory in directories
    ]
    recorded = set().union(*found)
    chosen = sorted(recorded) if epochs is None else sorted(set(epochs))
    results = {}
    for epoch in chosen:
        ranks = sorted(set().union(*(records.get(epoch, {}) for records in found)))
        joined = {rank: _joined(found, epoch, rank) for rank in ranks}
        results[epoch] = audit_rank_arrays(
            joined, policy=policy, epoch=epoch, max_examples=max_examples
        )
    return results


def _joined(found: list[dict[int, dict[int, Path]]], epoch: int, rank: int) -> memoryview:
    """One rank's IDs of `epoch` over the phases, each later phase's fast-forward replay left out."""
    parts: list[memoryview] = []
    before: list[int] = []  # what the phases so far consumed: a later phase may replay it
    for index, records in enumerate(found):
        if index and before:
            record = after_fast_forward(records, epoch, rank, before)
        else:
            record = phase_record(records, epoch, rank)
        parts.append(record.kept)
        if index < len(found) - 1:
            before += record.kept.tolist()
    return memoryview(b"".join(part.cast("B") for part in parts))
