"""A resumed phase's fast-forward by iteration: the IDs consumed before it, drawn again, not trained on.

A resumed run that skips the batches it already trained on by drawing them
(`itertools.islice(loader, trained_this_epoch, None)` over a `track_ids`
loader) records them again: the wrapper sees every batch the loader yields.
Its record of an epoch then begins with exactly the IDs the phases before it
consumed in that epoch. Such a replay is read as a fast-forward, and left
out of the phases' joined IDs, when nothing shows a training step between
drawing it and drawing the phase's next ID:

- the records' `.updates` (the optimizer steps the process had taken when
  each batch came, counted by torch's global step hook) show none, where the
  process took any optimizer step while drawing these IDs;
- else the `.steps` marks (record() calls) show none.

A resume that trains the replayed batches again takes a step in between, so
its replay stays in and reads as IDs consumed again. Without optimizer steps
and record() calls the two cannot be told apart; the replay is then read as a
fast-forward (the states show a retraining). A batch drawn right after the
replay and never trained on counts as consumed: nothing here tells it apart.

Used by the resume-boundary audit (resume/sample_order.py) and the chain
coverage audit (coverage/recorded_ids.py).
"""

from __future__ import annotations

import sys
from bisect import bisect_right
from dataclasses import dataclass, replace
from pathlib import Path

from trainparity._internal.recording.record_ids import (
    ConsumptionSteps,
    batch_ends,
    batch_updates,
    consumption_steps,
    read_recorded_ids,
)

__all__ = ["PhaseRecord", "after_fast_forward", "phase_record"]

Records = dict[int, dict[int, Path]]  # {epoch: {rank: record file}}, as recorded_epochs gives

_EMPTY = memoryview(b"").cast("q")


@dataclass(frozen=True)
class PhaseRecord:
    """One phase's IDs of one epoch on one rank, and what places them in its training.

    `steps`: the step during which each was consumed (record() marks).
    `ends` and `updates`: per recorded batch, the ID count after it and the
    optimizer steps its process had taken when it came. `skipped`: the
    leading IDs read as a fast-forward (drawn to skip them, not trained on).
    """

    values: memoryview
    steps: ConsumptionSteps
    ends: memoryview = _EMPTY
    updates: memoryview = _EMPTY
    skipped: int = 0

    @property
    def kept(self) -> memoryview:
        """The IDs the phase consumed, a fast-forward's replay left out."""
        return self.values[self.skipped :]

    def update_at(self, position: int) -> int | None:
        """The optimizer steps taken when the ID at `position` came; None when not recorded."""
        batches = min(len(self.ends), len(self.updates))  # a torn flush may leave one short
        batch = bisect_right(self.ends, position)
        return self.updates[batch] if batch < batches else None


def phase_record(records: Records, epoch: int, rank: int) -> PhaseRecord:
    """The record of `rank` in `epoch` (empty when it has none), nothing skipped."""
    path = records.get(epoch, {}).get(rank)
    if path is None:
        return PhaseRecord(_EMPTY, ConsumptionSteps([]))
    view = read_recorded_ids(path)
    if sys.byteorder != "little":  # records are little-endian
        raise NotImplementedError("ID records are read on little-endian hosts only")
    values = view.cast("q") if len(view) else _EMPTY
    return PhaseRecord(values, consumption_steps(path), batch_ends(path), batch_updates(path))


def after_fast_forward(records: Records, epoch: int, rank: int, before: list[int]) -> PhaseRecord:
    """A resumed phase's record of `rank` in `epoch`, its fast-forward replay of `before` skipped.

    `before`: the IDs the earlier phases consumed in this epoch on this rank,
    in order. `skipped` is `len(before)` when the record begins with exactly
    them and no training step separates them from the phase's next ID (module
    docstring), else 0; also 0 when the phase consumed nothing after them.
    """
    record = phase_record(records, epoch, rank)
    count = len(before)
    values = record.values
    if not count or len(values) < count or values[:count].tolist() != before:
        return record
    if len(values) > count:
        after: tuple[PhaseRecord, int] | None = (record, count)
    else:  # the replay fills the record: the next ID is in a later epoch's, if anywhere
        after = _next_consumed(records, epoch, rank)
    # A resumed phase trains at least one step past its split: with nothing consumed after the
    # replay, the replay is what it trained on (a loop that records after each step does so).
    if after is not None and not _step_between(record, *after):
        return replace(record, skipped=count)
    return record


def _next_consumed(records: Records, epoch: int, rank: int) -> tuple[PhaseRecord, int] | None:
    """Where a phase consumed its first ID after its record of `epoch`: (record, position)."""
    for later in sorted(e for e in records if e > epoch):
        found = phase_record(records, later, rank)
        if len(found.values):
            return found, 0
    return None


def _step_between(replay: PhaseRecord, following: PhaseRecord, position: int) -> bool:
    """Whether a training step came between the replay's first ID and `following`'s at `position`."""
    first, last = replay.update_at(0), following.update_at(position)
    if first is not None and last is not None:
        if last != first:
            return True
        final = following.update_at(len(following.values) - 1)
        if final is not None and final != first:
            return False  # this process's optimizer steps are counted, and none came in between
    # No optimizer step counted (another optimizer, or none yet): record() marks the steps.
    return replay.steps.step_at(0) != following.steps.step_at(position)
