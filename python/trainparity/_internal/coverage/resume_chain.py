"""The sample order of a resume chain (A→B→C) against the uninterrupted run: which rule applies.

When every phase ran on the reference's ranks, each rank's IDs across the
phases must equal the reference rank's (the per-rank rule, which names the
rank, phase and boundary). When a phase ran on another number of ranks that
rule cannot apply, and the chain must keep the reference's global sample
order instead (SameGlobalOrder), which names the first global batch.
"""

from __future__ import annotations

from pathlib import Path

from trainparity._internal.coverage.global_order import audit_global_order
from trainparity._internal.coverage.resume_boundary import (
    BoundaryDifference,
    chain_coverage_differences,
)
from trainparity._internal.recording.record_ids import recorded_epochs

__all__ = ["resume_chain_differences"]


def _world_size(directory: Path) -> int:
    """1 + the highest rank that recorded IDs in `directory` (0: none did)."""
    if not directory.is_dir():
        return 0
    return 1 + max(
        (rank for ranks in recorded_epochs(directory).values() for rank in ranks), default=-1
    )


def resume_chain_differences(
    reference: Path, phases: list[tuple[str, Path]]
) -> list[BoundaryDifference]:
    """Sample order differences of the phases' records from the reference's, by the rule that applies.

    `phases`: (name, record directory) per phase, in order. Empty when the
    reference recorded no IDs, or when the order holds.
    """
    world_size = _world_size(reference)
    if not world_size:
        return []
    # A phase that recorded nothing (it resumed past the end) changes no world size.
    if all(_world_size(directory) in (0, world_size) for _name, directory in phases):
        return chain_coverage_differences(reference, phases)
    result = audit_global_order(reference, [directory for _name, directory in phases])
    if result.difference is None:
        return []
    return [BoundaryDifference(result.difference, result.step)]
