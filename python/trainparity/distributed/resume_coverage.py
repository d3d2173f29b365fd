"""Sample order across the resume boundaries: the candidate phases must consume what baseline_a did.

When the training script records the IDs it consumes (`record_ids`),
check_resume gives every phase its own record directory. For each epoch and
rank that baseline_a recorded, the IDs of the candidate phases in order
(candidate_split, then each resumed phase of a chain, candidate_resume last)
must be exactly baseline_a's sequence. The first position
where they part is reported at `coverage.epoch{E}.rank{R}`, as a repeated ID
(a resumed sampler that restarted its epoch, or fast-forwarded too little),
a missing ID (one that skipped ahead), an extra ID, or a different order.

When the script also calls `record()`, each ID is placed on the step axis
(the `.steps` marks beside the records): a difference comes with the step
during which the candidate consumed the differing position, or, where the
candidate never reached it, the step during which baseline_a did.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from trainparity.comparison.policies import Difference
from trainparity.distributed.record_ids import (
    ConsumptionSteps,
    consumption_steps,
    read_recorded_ids,
    recorded_epochs,
)

__all__ = ["BoundaryDifference", "resume_coverage_differences"]

_CHUNK = 1 << 16  # values compared at once as bytes before looking inside a chunk


@dataclass(frozen=True)
class BoundaryDifference:
    """A difference in sample order, and the step of its position (None: no record() placed it)."""

    difference: Difference
    step: int | None


@dataclass(frozen=True)
class _PhaseIds:
    """One phase's IDs of one epoch on one rank, and the step during which each was consumed."""

    values: memoryview
    steps: ConsumptionSteps


def _phase_ids(records: dict[int, dict[int, Path]], epoch: int, *, rank: int) -> _PhaseIds:
    path = records.get(epoch, {}).get(rank)
    if path is None:
        return _PhaseIds(memoryview(b"").cast("q"), ConsumptionSteps([]))
    view = read_recorded_ids(path)
    if sys.byteorder != "little":  # records are little-endian
        raise NotImplementedError("ID records are read on little-endian hosts only")
    values = view.cast("q") if len(view) else memoryview(b"").cast("q")
    return _PhaseIds(values, consumption_steps(path))


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


def _during(step: int | None) -> str:
    return "" if step is None else f" during step {step}"


def _describe(
    epoch: int,
    rank: int | None,
    baseline: _PhaseIds,
    candidates: list[tuple[str, _PhaseIds]],
    actual: list[int],
    position: int,
) -> BoundaryDifference:
    expected = baseline.values
    phase, offset, steps = _phase_at(candidates, position)
    baseline_step = baseline.steps.step_at(position) if position < len(expected) else None
    candidate_step = steps.step_at(offset) if position < len(actual) else None
    ranks = "on all ranks together" if rank is None else f"on rank {rank}"
    where = (
        f"position {position} of epoch {epoch} {ranks} "
        f"({phase}'s position {offset}{_during(candidate_step)})"
    )
    baseline_text = f"ID {expected[position]}" if position < len(expected) else "no more IDs"
    baseline_text = (
        f"{baseline_text} at position {position}{_during(baseline_step)} "
        f"({len(expected)} IDs in the epoch)"
    )
    path = f"coverage.epoch{epoch}." + ("global" if rank is None else f"rank{rank}")
    if position >= len(actual):
        stopped = " + ".join(_short_names(name for name, _ in candidates))
        difference = Difference(
            path=path,
            reason="sample_missing",
            baseline=baseline_text,
            candidate=f"ID {expected[position]} never consumed: {stopped} stop after "
            f"{len(actual)} IDs",
        )
        return BoundaryDifference(difference, baseline_step)
    return BoundaryDifference(
        _consumed_difference(path, expected, actual, position, where, baseline_text),
        candidate_step,
    )


def _phase_at(
    candidates: list[tuple[str, _PhaseIds]], position: int
) -> tuple[str, int, ConsumptionSteps]:
    """(phase, position within it, its steps) of a position in the candidates' joined sequence."""
    offset = position
    for name, ids in candidates[:-1]:
        if offset < len(ids.values):
            return name, offset, ids.steps
        offset -= len(ids.values)
    name, ids = candidates[-1]
    return name, offset, ids.steps


def _short_names(names: Iterable[str]) -> list[str]:
    """`split + resume` as the single-split message always said; chains name their phases."""
    listed = list(names)
    if listed == ["candidate_split", "candidate_resume"]:
        return ["split", "resume"]
    return listed


def _consumed_difference(
    path: str, expected: memoryview, actual: list[int], position: int, where: str, baseline: str
) -> Difference:
    """The difference at a position the candidate consumed: what it took there instead."""
    value = actual[position]
    earlier = actual.index(value) if value in actual[:position] else None
    if earlier is not None:
        return Difference(
            path=path,
            reason="sample_repeated",
            baseline=baseline,
            candidate=f"ID {value} consumed again at {where}; first consumed at position {earlier}",
        )
    if position >= len(expected):
        return Difference(
            path=path,
            reason="sample_extra",
            baseline=baseline,
            candidate=f"ID {value} at {where}, after the baseline's last ID",
        )
    wanted = expected[position]
    if wanted not in actual:
        return Difference(
            path=path,
            reason="sample_missing",
            baseline=baseline,
            candidate=f"ID {wanted} never consumed; ID {value} at {where} instead",
        )
    return Difference(
        path=path, reason="sample_order", baseline=baseline, candidate=f"ID {value} at {where}"
    )


def resume_coverage_differences(
    run_root: Path,
    candidate_phases: Sequence[str] = ("candidate_split", "candidate_resume"),
    *,
    global_order: bool = False,
) -> list[BoundaryDifference]:
    """Differences of the candidate phases' joined sample order from baseline_a's, per epoch and rank.

    `candidate_phases` in the order they ran (a chain of resumes lists every
    link). `global_order`: the phases ran on different world sizes, so no
    rank's sequence carries over; every phase's ranks are merged into one
    global sequence instead (each step's IDs from all ranks, sorted, step
    after step; `_global_ids`) and compared at `coverage.epoch{E}.global`.
    Empty when baseline_a recorded no IDs (the script does not call
    record_ids).
    """
    baseline = _records(run_root / "baseline_a" / "ids")
    if not baseline:
        return []
    candidates = [(name, _records(run_root / name / "ids")) for name in candidate_phases]
    differences = []
    every = [baseline, *(records for _, records in candidates)]
    for epoch in sorted(set().union(*every)):
        if global_order:
            groups: list[tuple[int | None, Callable]] = [(None, _global_ids)]
        else:
            ranks = set().union(*(records.get(epoch, {}) for records in every))
            groups = [(rank, partial(_phase_ids, rank=rank)) for rank in sorted(ranks)]
        for rank, ids_of in groups:
            expected = ids_of(baseline, epoch)
            phases = [(name, ids_of(records, epoch)) for name, records in candidates]
            actual = [value for _, ids in phases for value in ids.values.tolist()]
            position = _first_mismatch(expected.values, actual)
            if position is not None:
                differences.append(_describe(epoch, rank, expected, phases, actual, position))
    return differences


def _global_ids(records: dict[int, dict[int, Path]], epoch: int) -> _PhaseIds:
    """One phase's IDs of one epoch on all its ranks: step by step, each step's IDs sorted.

    Within a step, which rank took which sample depends on the world size;
    the step's global batch does not. IDs that no record() placed on a step
    follow, rank by rank.
    """
    batches: dict[int | None, list[int]] = {}
    for rank in sorted(records.get(epoch, {})):
        ids = _phase_ids(records, epoch, rank=rank)
        for position, value in enumerate(ids.values.tolist()):
            batches.setdefault(ids.steps.step_at(position), []).append(value)
    values: list[int] = []
    marks = []
    for step in sorted(step for step in batches if step is not None):
        batch = sorted(batches[step])
        marks.append((step, len(values), len(values) + len(batch)))
        values.extend(batch)
    values.extend(batches.get(None, []))
    return _PhaseIds(memoryview(array("q", values)), ConsumptionSteps(marks))
