"""Sample order across resume boundaries, per rank: the phases must consume what baseline_a consumed.

When the training script records the IDs it consumes (`record_ids`,
`track_ids`), check_resume gives every phase its own record directory. For
each epoch and rank that baseline_a recorded, the IDs of the phases one after
the other (candidate_split, then candidate_resume, and so on along a resume
chain) must be exactly baseline_a's sequence. The first position
where they part is reported at `coverage.epoch{E}.rank{R}`, as a repeated ID
(a resumed sampler that restarted its epoch, or fast-forwarded too little),
a missing ID (one that skipped ahead), an extra ID, or a different order.

A resumed phase that fast-forwards its loader by iterating past the batches
already consumed (`itertools.islice(loader, trained, None)` over a wrapped
loader) records those batches again, drawn but not trained on. Its record
of an epoch then begins with exactly the IDs the phases before it consumed
in that epoch. Such a replay is read as a fast-forward, and left out, when
nothing shows a training step between drawing it and drawing the first ID
after it: no optimizer step (the `.updates` counts, torch.optim's step
hook), and, where the process took none, no record() call (the `.steps`
marks). A resume that trains on the replayed batches again takes a step in
between, so its replay stays in and is reported as consumed again. Without
optimizer steps and record() calls the two cannot be told apart here; the
replay is then read as a fast-forward, and the states alone show a
retraining.

When the script also calls `record()`, each ID is placed on the step axis
(the `.steps` marks beside the records): a difference comes with the step
during which the candidate consumed the differing position, or, where the
candidate never reached it, the step during which baseline_a did.

A chain in which some phase ran on another number of ranks cannot keep the
per-rank rule; it must keep baseline_a's global sample order instead
(SameGlobalOrder), which names the first global batch
(`resume_chain_differences` picks the rule that applies).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.comparison.policies import Difference
from trainparity._internal.coverage.fast_forward import (
    PhaseRecord,
    after_fast_forward,
    phase_record,
)
from trainparity._internal.coverage.global_order import audit_global_order
from trainparity._internal.recording.record_ids import recorded_epochs

__all__ = ["BoundaryDifference", "chain_coverage_differences", "resume_chain_differences"]

_CHUNK = 1 << 16  # values compared at once as bytes before looking inside a chunk


@dataclass(frozen=True)
class BoundaryDifference:
    """A difference in sample order, and the step of its position (None: no record() placed it)."""

    difference: Difference
    step: int | None


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
    rank: int,
    baseline: PhaseRecord,
    phases: list[tuple[str, PhaseRecord]],
    actual: list[int],
    position: int,
) -> BoundaryDifference:
    expected = baseline.values
    index, offset = 0, position
    # The phase that consumed `position` (the last one when the candidate stopped before it).
    while index < len(phases) - 1 and offset >= len(phases[index][1].kept):
        offset -= len(phases[index][1].kept)
        index += 1
    phase, ids = phases[index]
    offset += ids.skipped  # positions count in the phase's own record, replay included
    baseline_step = baseline.steps.step_at(position) if position < len(expected) else None
    candidate_step = ids.steps.step_at(offset) if position < len(actual) else None
    boundary = f", after boundary {index}" if index and len(phases) > 2 else ""
    skipped = f", after the {ids.skipped} IDs it drew to fast-forward" if ids.skipped else ""
    where = (
        f"position {position} of epoch {epoch} on rank {rank} "
        f"({phase}'s position {offset}{_during(candidate_step)}{boundary}{skipped})"
    )
    baseline_text = f"ID {expected[position]}" if position < len(expected) else "no more IDs"
    baseline_text = (
        f"{baseline_text} at position {position}{_during(baseline_step)} "
        f"({len(expected)} IDs in the epoch)"
    )
    path = f"coverage.epoch{epoch}.rank{rank}"
    if position >= len(actual):
        names = " + ".join(name for name, _ids in phases)
        difference = Difference(
            path=path,
            reason="sample_missing",
            baseline=baseline_text,
            candidate=f"ID {expected[position]} never consumed: {names} stop after "
            f"{len(actual)} IDs",
        )
        return BoundaryDifference(difference, baseline_step)
    return BoundaryDifference(
        _consumed_difference(path, expected, actual, position, where, baseline_text),
        candidate_step,
    )


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


def chain_coverage_differences(
    baseline_dir: Path, phase_dirs: list[tuple[str, Path]]
) -> list[BoundaryDifference]:
    """Differences of the phases' concatenated sample order from the baseline's, per epoch and rank.

    `phase_dirs`: (name, record directory) of each phase of a resume chain,
    in order (A, B, C, …), all on the baseline's ranks. For each epoch and
    rank, the phases' IDs one after the other must be exactly the baseline's
    sequence, a resumed phase's fast-forward replay left out (module
    docstring); the first position where they part is reported, with the
    phase (and, past the first boundary, which boundary) that consumed it.
    Empty when the baseline recorded no IDs.
    """
    baseline = _records(baseline_dir)
    if not baseline:
        return []
    phases = [(name, _records(directory)) for name, directory in phase_dirs]
    differences = []
    epochs = set(baseline).union(*(records for _name, records in phases))
    for epoch in sorted(epochs):
        ranks = set(baseline.get(epoch, {})).union(
            *(records.get(epoch, {}) for _name, records in phases)
        )
        for rank in sorted(ranks):
            expected = phase_record(baseline, epoch, rank)
            consumed: list[tuple[str, PhaseRecord]] = []
            actual: list[int] = []  # what the phases so far consumed in this epoch
            for index, (name, records) in enumerate(phases):
                if index:  # a resumed phase: its fast-forward replay is left out
                    ids = after_fast_forward(records, epoch, rank, actual)
                else:
                    ids = phase_record(records, epoch, rank)
                consumed.append((name, ids))
                actual += ids.kept.tolist()
            position = _first_mismatch(expected.values, actual)
            if position is not None:
                differences.append(_describe(epoch, rank, expected, consumed, actual, position))
    return differences


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
