"""Sample order across the resume boundary: split + resume must consume what baseline_a consumed.

When the training script records the IDs it consumes (`record_ids`),
check_resume gives every phase its own record directory. For each epoch and
rank that baseline_a recorded, the IDs of candidate_split followed by those
of candidate_resume must be exactly baseline_a's sequence. The first position
where they part is reported at `coverage.epoch{E}.rank{R}`, as a repeated ID
(a resumed sampler that restarted its epoch, or fast-forwarded too little),
a missing ID (one that skipped ahead), an extra ID, or a different order.
"""

from __future__ import annotations

import sys
from pathlib import Path

from trainparity.comparison.policies import Difference
from trainparity.distributed.record_ids import read_recorded_ids, recorded_epochs

__all__ = ["resume_coverage_differences"]

_CHUNK = 1 << 16  # values compared at once as bytes before looking inside a chunk


def _values(records: dict[int, dict[int, Path]], epoch: int, rank: int) -> memoryview:
    path = records.get(epoch, {}).get(rank)
    view = read_recorded_ids(path) if path is not None else memoryview(b"")
    if sys.byteorder != "little":  # records are little-endian
        raise NotImplementedError("ID records are read on little-endian hosts only")
    return view.cast("q") if len(view) else memoryview(b"").cast("q")


def _records(directory: Path) -> dict[int, dict[int, Path]]:
    return recorded_epochs(directory) if directory.is_dir() else {}


def _first_mismatch(expected: memoryview, actual: list[int]) -> int | None:
    """The first position where the two sequences differ (length included), or None."""
    common = min(len(expected), len(actual))
    for start in range(0, common, _CHUNK):
        stop = min(start + _CHUNK, common)
        if expected[start:stop].tolist() != actual[start:stop]:
            for position in range(start, stop):
                if expected[position] != actual[position]:
                    return position
    return None if len(expected) == len(actual) else common


def _describe(
    epoch: int, rank: int, expected: memoryview, actual: list[int], split_count: int, position: int
) -> Difference:
    phase, offset = (
        ("candidate_split", position)
        if position < split_count
        else ("candidate_resume", position - split_count)
    )
    where = f"position {position} of epoch {epoch} on rank {rank} ({phase}'s position {offset})"
    baseline = f"ID {expected[position]}" if position < len(expected) else "no more IDs"
    baseline = f"{baseline} at position {position} ({len(expected)} IDs in the epoch)"
    if position >= len(actual):
        missing = expected[position]
        return Difference(
            path=f"coverage.epoch{epoch}.rank{rank}",
            reason="sample_missing",
            baseline=baseline,
            candidate=f"ID {missing} never consumed: split + resume stop after {len(actual)} IDs",
        )
    value = actual[position]
    earlier = actual.index(value) if value in actual[:position] else None
    if earlier is not None:
        return Difference(
            path=f"coverage.epoch{epoch}.rank{rank}",
            reason="sample_repeated",
            baseline=baseline,
            candidate=f"ID {value} consumed again at {where}; first consumed at position {earlier}",
        )
    if position >= len(expected):
        return Difference(
            path=f"coverage.epoch{epoch}.rank{rank}",
            reason="sample_extra",
            baseline=baseline,
            candidate=f"ID {value} at {where}, after the baseline's last ID",
        )
    wanted = expected[position]
    if wanted not in actual:
        return Difference(
            path=f"coverage.epoch{epoch}.rank{rank}",
            reason="sample_missing",
            baseline=baseline,
            candidate=f"ID {wanted} never consumed; ID {value} at {where} instead",
        )
    return Difference(
        path=f"coverage.epoch{epoch}.rank{rank}",
        reason="sample_order",
        baseline=baseline,
        candidate=f"ID {value} at {where}",
    )


def resume_coverage_differences(run_root: Path) -> list[Difference]:
    """Differences of split + resume's sample order from baseline_a's, epoch by epoch, rank by rank.

    Empty when baseline_a recorded no IDs (the script does not call record_ids).
    """
    baseline = _records(run_root / "baseline_a" / "ids")
    if not baseline:
        return []
    split = _records(run_root / "candidate_split" / "ids")
    resume = _records(run_root / "candidate_resume" / "ids")
    differences = []
    for epoch in sorted(set(baseline) | set(split) | set(resume)):
        ranks = set(baseline.get(epoch, {})) | set(split.get(epoch, {}))
        for rank in sorted(ranks | set(resume.get(epoch, {}))):
            expected = _values(baseline, epoch, rank)
            split_part = _values(split, epoch, rank).tolist()
            actual = split_part + _values(resume, epoch, rank).tolist()
            position = _first_mismatch(expected, actual)
            if position is not None:
                differences.append(
                    _describe(epoch, rank, expected, actual, len(split_part), position)
                )
    return differences
