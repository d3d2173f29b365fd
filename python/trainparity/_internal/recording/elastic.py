"""Recordings of two world sizes compared step by step on the global state (state/reassembly.py).

A phase that ran on another rank count than baseline_a (an elastic resume)
has no rank to pair with baseline_a's ranks. Each step of each side is
turned into one global record instead: sharded tensors reassembled from
every rank's full-mode values, or, where some rank kept only summaries,
every tensor replaced by its global summary on both sides. Which of the two
was used is said in the report (`trajectory.compared_on`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from trainparity._internal.recording.phase_recordings import TrajectoryError
from trainparity._internal.recording.reader import RecordedStep, Recording
from trainparity._internal.state.reassembly import ReassemblyError, global_state

__all__ = ["GLOBAL_SUMMARIES", "GLOBAL_TENSORS", "JoinedStep", "global_pairs", "joined_steps"]

GLOBAL_TENSORS = "global tensors, reassembled from every rank's shards"
GLOBAL_SUMMARIES = (
    "global summaries (count, sum, L2 norm, max |x| of every tensor), combined from every "
    "rank's shards: a summary-mode step holds no values to reassemble"
)


@dataclass(frozen=True)
class JoinedStep:
    """One record() of every rank of a phase, in rank order (all claiming the same step)."""

    step: int
    records: tuple[RecordedStep, ...]


def joined_steps(recordings: dict[int, Recording], phase: str) -> list[JoinedStep]:
    """A phase's records, rank by rank joined per position; TrajectoryError if the ranks disagree."""
    ranks = sorted(recordings)
    lengths = {len(recordings[rank].steps) for rank in ranks}
    if len(lengths) > 1:
        raise TrajectoryError(f"{phase}'s ranks recorded different numbers of steps")
    joined = []
    for records in zip(*(recordings[rank].steps for rank in ranks), strict=True):
        claimed = {record.step for record in records}
        if len(claimed) > 1:
            raise TrajectoryError(f"{phase}'s ranks claimed different steps {sorted(claimed)}")
        joined.append(JoinedStep(records[0].step, tuple(records)))
    return joined


def global_pairs(
    pairs: Iterable[tuple[JoinedStep | None, JoinedStep | None, bool]], used: set[str]
) -> Iterator[tuple[RecordedStep | None, RecordedStep | None, bool]]:
    """Each aligned pair as two global records, lazily; adds the way each was compared to `used`."""
    for baseline, candidate, round_trip in pairs:
        present = [side for side in (baseline, candidate) if side is not None]
        full = all(record.full for side in present for record in side.records)
        used.add(GLOBAL_TENSORS if full else GLOBAL_SUMMARIES)
        yield _global(baseline, full), _global(candidate, full), round_trip


def _global(joined: JoinedStep | None, full: bool) -> RecordedStep | None:
    if joined is None:
        return None
    records = joined.records
    try:
        state = global_state(
            [record.state for record in records],
            summaries=None if full else (lambda rank, name: records[rank].summary(name)),
        )
    except ReassemblyError as error:
        raise TrajectoryError(
            f"step {joined.step} cannot be compared across world sizes: {error}"
        ) from None
    return RecordedStep(records[0].index, joined.step, full, state, {})  # type: ignore[arg-type]
