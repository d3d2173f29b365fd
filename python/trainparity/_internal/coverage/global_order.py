"""SameGlobalOrder: a resumed or elastic run consumes the uninterrupted run's global sample sequence.

The global sequence of one epoch is every global batch in turn, and within
global batch b, rank 0's batch b, then rank 1's, and so on: the order a
constant global batch is cut into ranks' shares. A run split into phases
(A→B→C, each on its own number of ranks) has one global sequence: phase A's
global batches, then phase B's, and so on. The policy holds when, epoch by
epoch, that sequence equals the uninterrupted reference run's, ID for ID.
Unlike the per-rank rule (each rank's IDs across the phases equal the
reference rank's) it holds across a change of world size, which is what a
sampler that keeps the global order (MosaicML Streaming's "elastic
determinism") promises.

Records are `record_ids`/`track_ids` directories, whose `.batches` files give
each rank's batch boundaries. The audit streams each rank's record in blocks
of global batches, so memory stays bounded whatever the run's length.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from trainparity._internal.comparison.policies import Difference
from trainparity._internal.outcomes import Outcome
from trainparity._internal.recording.record_ids import (
    batch_ends,
    consumption_steps,
    recorded_epochs,
)

__all__ = [
    "GlobalOrderResult",
    "MovedId",
    "SameGlobalOrder",
    "audit_global_order",
    "global_order_differences",
]

_BLOCK_IDS = 1 << 20  # IDs per rank read at once: a few MiB per rank in memory
_NUMPY_HINT = "the global order audit needs NumPy: pip install 'trainparity[numpy]'"


@dataclass(frozen=True)
class SameGlobalOrder:
    """Epoch by epoch, the global sequence (batch by batch, ranks ascending) equals the reference's."""

    name: ClassVar[str] = "same_global_order"


@dataclass(frozen=True)
class MovedId:
    """An ID the reference consumed in the first differing global batch, and where the run put it.

    `global_batch`/`position`/`phase`/`rank` are None when the run never
    consumed it in that epoch.
    """

    sample_id: int
    reference_global_batch: int
    reference_position: int
    global_batch: int | None
    position: int | None
    phase: int | None
    rank: int | None


@dataclass(frozen=True)
class GlobalOrderResult:
    """The verdict of SameGlobalOrder over all epochs, and the first place the sequences part."""

    outcome: Outcome
    message: str
    difference: Difference | None = None
    epoch: int | None = None
    global_batch: int | None = None
    position: int | None = None
    phase: int | None = None
    rank: int | None = None
    step: int | None = None
    moved: tuple[MovedId, ...] = ()
    world_sizes: tuple[int, ...] = ()


@dataclass
class _Rank:
    """One rank's record of one epoch in one phase: the file and its batch sizes."""

    path: Path
    sizes: Any  # numpy int64, one per batch


@dataclass
class _Phase:
    """One phase's records of one epoch: a (batch, rank) matrix of batch sizes."""

    ranks: list[_Rank | None]  # per rank (None: no record)
    sizes: Any  # numpy int64 (batches, world); 0 where a rank has no such batch
    first_batch: int  # the global batch index of its batch 0, counted across phases
    first_segment: int


@dataclass
class _Layout:
    """One side's global sequence of one epoch: a segment per (global batch, rank), in order.

    Segments run phase by phase, batch by batch, rank by rank (empty ones
    included, which position lookups skip): `end` is where each ends in the
    global sequence, `rank_start` where it starts in its rank's record.
    """

    phases: list[_Phase]
    end: Any
    rank_start: Any

    @property
    def length(self) -> int:
        return int(self.end[-1]) if len(self.end) else 0

    def _start(self, segment: int) -> int:
        return int(self.end[segment - 1]) if segment else 0

    def locate(self, np: Any, position: int) -> tuple[int, int, int, int, int]:
        """(global batch, position in it, phase, rank, position in the rank's record) of `position`."""
        segment = int(np.searchsorted(self.end, position, side="right"))
        index = max(i for i, phase in enumerate(self.phases) if phase.first_segment <= segment)
        phase = self.phases[index]
        world = phase.sizes.shape[1]
        batch, rank = divmod(segment - phase.first_segment, world)
        batch_start = self._start(phase.first_segment + batch * world)
        in_rank = int(self.rank_start[segment]) + position - self._start(segment)
        return phase.first_batch + batch, position - batch_start, index, rank, in_rank

    def batch_length(self, np: Any, batch: int) -> int:
        """How many IDs global batch `batch` holds (all its ranks' batches)."""
        index = max(i for i, phase in enumerate(self.phases) if phase.first_batch <= batch)
        phase = self.phases[index]
        return int(phase.sizes[batch - phase.first_batch].sum())

    def record(self, np: Any, segment: int) -> Path:
        index = max(i for i, phase in enumerate(self.phases) if phase.first_segment <= segment)
        phase = self.phases[index]
        rank = phase.ranks[(segment - phase.first_segment) % phase.sizes.shape[1]]
        assert rank is not None  # a non-empty segment exists only where a rank recorded IDs
        return rank.path


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as error:
        raise ImportError(_NUMPY_HINT) from error
    return numpy


def _rank_sizes(np: Any, path: Path) -> Any:
    """Batch sizes of one record; IDs after the last recorded end (a torn flush) are one batch."""
    count = path.stat().st_size // 8
    ends = np.frombuffer(batch_ends(path), dtype="<i8")
    ends = ends[ends <= count]
    if not len(ends) or ends[-1] != count:
        ends = np.append(ends, count)
    return np.diff(ends, prepend=0)


def _layout(np: Any, phases: list[dict[int, Path]]) -> _Layout:
    built, ends, starts = [], [], []
    first_batch = first_segment = 0
    for files in phases:
        world = max(files, default=-1) + 1
        ranks = [
            _Rank(files[rank], _rank_sizes(np, files[rank])) if rank in files else None
            for rank in range(world)
        ]
        batches = max((len(rank.sizes) for rank in ranks if rank), default=0)
        sizes = np.zeros((batches, world), dtype=np.int64)
        for index, rank in enumerate(ranks):
            if rank is not None:
                sizes[: len(rank.sizes), index] = rank.sizes
        built.append(_Phase(ranks, sizes, first_batch, first_segment))
        ends.append(sizes.reshape(-1))
        starts.append((np.cumsum(sizes, axis=0) - sizes).reshape(-1))
        first_batch += batches
        first_segment += batches * world
    end = np.cumsum(np.concatenate(ends)) if ends else np.zeros(0, np.int64)
    rank_start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    return _Layout(built, end, rank_start)


def _uniform_rows(np: Any, sizes: Any) -> int:
    """How many leading batches have one size on every rank (the common, fast case)."""
    if not sizes.size or sizes[0, 0] == 0:
        return 0
    uneven = np.flatnonzero((sizes != sizes[0, 0]).any(axis=1))
    return int(uneven[0]) if len(uneven) else len(sizes)


def _blocks(np: Any, layout: _Layout) -> Iterator[Any]:
    """The global sequence in order, as consecutive arrays of about _BLOCK_IDS IDs per rank."""
    for phase in layout.phases:
        handles = [open(rank.path, "rb") if rank else None for rank in phase.ranks]  # noqa: SIM115
        try:
            uniform = _uniform_rows(np, phase.sizes)
            if uniform:
                width = int(phase.sizes[0, 0])
                rows = max(1, _BLOCK_IDS // width)
                for first in range(0, uniform, rows):
                    count = min(rows, uniform - first)
                    block = np.empty((count, len(handles), width), dtype="<i8")
                    for index, handle in enumerate(handles):
                        block[:, index, :] = np.fromfile(
                            handle, dtype="<i8", count=count * width
                        ).reshape(count, width)
                    yield block.reshape(-1)
            rows = max(1, _BLOCK_IDS // max(1, int(phase.sizes.max(initial=1))))
            for first in range(uniform, len(phase.sizes), rows):
                yield _interleave(np, handles, phase.sizes[first : first + rows])
        finally:
            for handle in handles:
                if handle is not None:
                    handle.close()


def _interleave(np: Any, handles: list[Any], sizes: Any) -> Any:
    """Batches of uneven sizes (rows of `sizes`) cut into the global order, read rank by rank."""
    out_start = (np.cumsum(sizes.reshape(-1)) - sizes.reshape(-1)).reshape(sizes.shape)
    out = np.empty(int(sizes.sum()), dtype="<i8")
    for index, handle in enumerate(handles):
        mine = sizes[:, index]
        count = int(mine.sum())
        if not count:
            continue
        values = np.fromfile(handle, dtype="<i8", count=count)
        source_start = np.cumsum(mine) - mine
        out[np.repeat(out_start[:, index] - source_start, mine) + np.arange(count)] = values
    return out


def _first_part(np: Any, reference: Iterator[Any], run: Iterator[Any]) -> int | None:
    """The first global position where the two streams differ (a length counts), or None."""
    position, left, right = 0, np.zeros(0, "<i8"), np.zeros(0, "<i8")
    while True:
        if left is not None and not len(left):
            left = next(reference, None)
        if right is not None and not len(right):
            right = next(run, None)
        if left is None or right is None:
            return None if left is None and right is None else position
        common = min(len(left), len(right))
        if not np.array_equal(left[:common], right[:common]):
            return position + int(np.flatnonzero(left[:common] != right[:common])[0])
        position += common
        left, right = left[common:], right[common:]


def _positions_of(np: Any, layout: _Layout, wanted: Any) -> dict[int, int]:
    """{ID: its first position in the layout's global sequence} for the IDs in `wanted` it holds."""
    found: dict[int, int] = {}
    position = 0
    for block in _blocks(np, layout):
        hits = np.flatnonzero(np.isin(block, wanted))
        for index in hits:
            found.setdefault(int(block[index]), position + int(index))
        position += len(block)
        if len(found) == len(wanted):
            break
    return found


def _moved(
    np: Any,
    run: _Layout,
    batch: int,
    where: dict[int, int],
    moved_positions: Any,
    expected: Any,
) -> tuple[MovedId, ...]:
    """The reference IDs of global batch `batch` not consumed at their position, and where they went."""
    examples = []
    for offset, sample_id in zip(moved_positions.tolist(), expected.tolist(), strict=True):
        found = where.get(sample_id)
        located = run.locate(np, found)[:4] if found is not None else (None, None, None, None)
        examples.append(MovedId(sample_id, batch, offset, *located))
    return tuple(examples)


def _slice(np: Any, layout: _Layout, start: int, end: int) -> Any:
    """Positions [start, end) of the layout's global sequence, read segment by segment."""
    pieces = []
    segment = int(np.searchsorted(layout.end, start, side="right"))
    while segment < len(layout.end) and start < end:
        stop = min(end, int(layout.end[segment]))
        if stop > start:
            offset = int(layout.rank_start[segment]) + start - layout._start(segment)
            pieces.append(
                np.fromfile(
                    layout.record(np, segment), dtype="<i8", count=stop - start, offset=8 * offset
                )
            )
            start = stop
        segment += 1
    return np.concatenate(pieces) if pieces else np.zeros(0, "<i8")


def _records(directory: str | os.PathLike[str]) -> dict[int, dict[int, Path]]:
    path = Path(directory)
    return recorded_epochs(path) if path.is_dir() else {}


def _phase_name(index: int, count: int) -> str:
    """Phases are lettered as a resume chain is written, A→B→C."""
    if count == 1:
        return "the run"
    return f"phase {chr(ord('A') + index)}" if index < 26 else f"phase {index}"


def audit_global_order(
    reference: str | os.PathLike[str],
    phases: Sequence[str | os.PathLike[str]],
    *,
    policy: SameGlobalOrder | None = None,
    max_examples: int = 10,
) -> GlobalOrderResult:
    """Audit `policy` (SameGlobalOrder) over the record directories of a run's phases, in order.

    `reference`: the uninterrupted run's `record_ids`/`track_ids` directory;
    `phases`: the resumed (or elastic) run's directories, A, B, C, …, each on
    any number of ranks. FAIL names the first epoch, global batch and
    position where the global sequences part, the phase and rank that
    consumed it, and up to `max_examples` IDs of that global batch that moved
    (where the run consumed them instead, or never). ABSTAIN when the
    reference recorded nothing.
    """
    if policy is None:
        policy = SameGlobalOrder()
    if not isinstance(policy, SameGlobalOrder):
        raise TypeError(f"policy must be SameGlobalOrder(), not {policy!r}")
    if isinstance(phases, (str, os.PathLike)) or not phases:
        raise ValueError(
            "phases must be a non-empty list of record directories, one per phase in order"
        )
    if type(max_examples) is not int or max_examples < 1:
        raise ValueError(f"max_examples must be a positive int, not {max_examples!r}")
    np = _numpy()
    expected = _records(reference)
    if not expected:
        return GlobalOrderResult(
            Outcome.ABSTAIN, f"the reference {os.fspath(reference)!r} recorded no sample IDs"
        )
    recorded = [_records(directory) for directory in phases]
    world_sizes = tuple(
        max((max(ranks) + 1 for ranks in epochs.values()), default=0) for epochs in recorded
    )
    for epoch in sorted(set(expected).union(*recorded)):
        reference_layout = _layout(np, [expected.get(epoch, {})])
        run_layout = _layout(np, [epochs.get(epoch, {}) for epochs in recorded])
        position = _first_part(np, _blocks(np, reference_layout), _blocks(np, run_layout))
        if position is not None:
            return _failure(
                np, epoch, position, reference_layout, run_layout, world_sizes, max_examples
            )
    return GlobalOrderResult(
        Outcome.PASS,
        f"every epoch's global sample sequence equals the reference's "
        f"(world sizes {', '.join(map(str, world_sizes))})",
        world_sizes=world_sizes,
    )


def _failure(
    np: Any,
    epoch: int,
    position: int,
    reference: _Layout,
    run: _Layout,
    world_sizes: tuple[int, ...],
    max_examples: int,
) -> GlobalOrderResult:
    count = len(world_sizes)
    located = reference if position < reference.length else run  # past the reference's end
    batch, in_batch, *_ = located.locate(np, position)
    phase = rank = step = None
    if position < run.length:
        _batch, _in_batch, phase, rank, rank_position = run.locate(np, position)
        record = run.phases[phase].ranks[rank]
        step = consumption_steps(record.path).step_at(rank_position) if record else None
    taken = _slice(np, run, position, position + 1)
    wanted = _slice(np, reference, position, position + 1)
    moved_positions = expected = np.zeros(0, "<i8")
    if position < reference.length:
        start = position - in_batch
        stop = min(reference.length, start + reference.batch_length(np, batch))
        expected = _slice(np, reference, start, stop)
        consumed = _slice(np, run, start, min(stop, run.length))
        consumed = np.concatenate([consumed, np.full(len(expected) - len(consumed), -1, "<i8")])
        moved_positions = np.flatnonzero(expected != consumed)[:max_examples]
        expected = expected[moved_positions]
    # One pass over the run finds the moved IDs and the one it took instead.
    where = _positions_of(np, run, np.unique(np.concatenate([expected, taken])))
    moved = _moved(np, run, batch, where, moved_positions, expected)
    where_text = f"epoch {epoch}, global batch {batch}, position {in_batch}"
    if phase is not None:
        ranks = _ranks_text(run.phases[phase].ranks)
        where_text += f" ({_phase_name(phase, count)} on {ranks}, rank {rank}"
        where_text += f", during step {step})" if step is not None else ")"
    baseline_text = (
        f"ID {int(wanted[0])} at epoch {epoch}, global batch {batch}, position {in_batch}"
        if len(wanted)
        else f"no more IDs after {reference.length} in epoch {epoch}"
    )
    candidate_text = (
        f"ID {int(taken[0])} at {where_text}{_repeat_text(np, run, where, taken, position)}"
        if len(taken)
        else f"no more IDs after {run.length} in epoch {epoch}"
    )
    if moved:
        shown = ", ".join(_moved_text(example, world_sizes) for example in moved)
        candidate_text += f"; moved: {shown}"
    difference = Difference(
        path=f"coverage.epoch{epoch}.global_batch{batch}",
        reason="global_order",
        baseline=baseline_text,
        candidate=candidate_text,
    )
    return GlobalOrderResult(
        Outcome.FAIL,
        f"the global sample sequence parts from the reference's at {where_text}",
        difference,
        epoch,
        batch,
        in_batch,
        phase,
        rank,
        step,
        moved,
        world_sizes,
    )


def _ranks_text(ranks: Sequence[_Rank | None]) -> str:
    """'4 ranks' when ranks 0..3 all recorded IDs; 'ranks 0 and 2' when only some did
    (under tensor parallel only the first rank of each TP group reports its group's IDs)."""
    reporting = [index for index, rank in enumerate(ranks) if rank is not None]
    if len(reporting) == len(ranks):
        return f"{len(ranks)} rank{'' if len(ranks) == 1 else 's'}"
    if len(reporting) == 1:
        return f"rank {reporting[0]} alone"
    listed = ", ".join(map(str, reporting[:-1]))
    return f"ranks {listed} and {reporting[-1]}"


def _repeat_text(np: Any, run: _Layout, where: dict[int, int], taken: Any, position: int) -> str:
    """', consumed again (first at …)' when the run consumed this ID earlier in the epoch."""
    first = where.get(int(taken[0]), position)
    if first >= position:
        return ""
    batch, in_batch, *_ = run.locate(np, first)
    return f", consumed again (first at global batch {batch}, position {in_batch})"


def _moved_text(moved: MovedId, world_sizes: tuple[int, ...]) -> str:
    if moved.global_batch is None:
        return f"ID {moved.sample_id} (position {moved.reference_position}) never consumed"
    return (
        f"ID {moved.sample_id} (position {moved.reference_position}) to global batch "
        f"{moved.global_batch} position {moved.position} "
        f"({_phase_name(moved.phase or 0, len(world_sizes))}, rank {moved.rank})"
    )


def global_order_differences(
    reference: str | os.PathLike[str], phases: Sequence[str | os.PathLike[str]]
) -> list[Difference]:
    """The first global order difference of the phases from the reference, as check_resume reports it."""
    result = audit_global_order(reference, phases)
    return [result.difference] if result.difference is not None else []
