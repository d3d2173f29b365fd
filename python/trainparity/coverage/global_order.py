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

from trainparity.comparison.policies import Difference
from trainparity.distributed.record_ids import batch_ends, consumption_steps, recorded_epochs
from trainparity.outcomes import Outcome

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
class _Layout:
    """One side's global sequence of one epoch: a segment per (global batch, rank) in order."""

    ranks: list[list[_Rank | None]]  # per phase, per rank (None: no record)
    phase: Any  # numpy arrays, one entry per segment
    rank: Any
    batch: Any  # global batch index, counted across phases
    rank_start: Any  # the segment's first position in its rank's record
    end: Any  # the segment's end in the global sequence (exclusive)

    @property
    def length(self) -> int:
        return int(self.end[-1]) if len(self.end) else 0

    def locate(self, np: Any, position: int) -> tuple[int, int, int, int, int]:
        """(global batch, position in it, phase, rank, position in the rank's record) of `position`."""
        segment = int(np.searchsorted(self.end, position, side="right"))
        start = int(self.end[segment - 1]) if segment else 0
        batch = int(self.batch[segment])
        first = int(np.searchsorted(self.batch, batch, side="left"))
        batch_start = int(self.end[first - 1]) if first else 0
        return (
            batch,
            position - batch_start,
            int(self.phase[segment]),
            int(self.rank[segment]),
            int(self.rank_start[segment]) + position - start,
        )


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
    ranks_per_phase, columns = [], {"phase": [], "rank": [], "batch": [], "start": [], "size": []}
    first_batch = 0
    for index, files in enumerate(phases):
        world = max(files, default=-1) + 1
        ranks = [
            _Rank(files[rank], _rank_sizes(np, files[rank])) if rank in files else None
            for rank in range(world)
        ]
        ranks_per_phase.append(ranks)
        batches = max((len(rank.sizes) for rank in ranks if rank), default=0)
        sizes = np.zeros((batches, world), dtype=np.int64)
        for rank_index, rank in enumerate(ranks):
            if rank is not None:
                sizes[: len(rank.sizes), rank_index] = rank.sizes
        starts = np.cumsum(sizes, axis=0) - sizes  # each segment's start in its rank's record
        keep = sizes.reshape(-1) > 0
        batch_index, rank_index = np.divmod(np.arange(batches * world), max(world, 1))
        columns["phase"].append(np.full(int(keep.sum()), index))
        columns["rank"].append(rank_index[keep])
        columns["batch"].append(batch_index[keep] + first_batch)
        columns["start"].append(starts.reshape(-1)[keep])
        columns["size"].append(sizes.reshape(-1)[keep])
        first_batch += batches
    joined = {
        name: np.concatenate(parts) if parts else np.zeros(0, np.int64)
        for name, parts in columns.items()
    }
    return _Layout(
        ranks_per_phase,
        joined["phase"],
        joined["rank"],
        joined["batch"],
        joined["start"],
        np.cumsum(joined["size"]),
    )


def _blocks(np: Any, layout: _Layout) -> Iterator[Any]:
    """The global sequence in order, as consecutive arrays of about _BLOCK_IDS IDs per rank."""
    sizes = np.diff(layout.end, prepend=0)
    segment = 0
    for phase, ranks in enumerate(layout.ranks):
        handles = {
            rank: open(record.path, "rb")  # noqa: SIM115 - closed below, all together
            for rank, record in enumerate(ranks)
            if record is not None
        }
        try:
            in_phase = int(np.searchsorted(layout.phase, phase, side="right"))
            while segment < in_phase:
                # Whole global batches, about _BLOCK_IDS IDs per rank.
                budget = int(layout.end[segment - 1]) if segment else 0
                stop = int(np.searchsorted(layout.end, budget + _BLOCK_IDS * len(handles), "right"))
                stop = min(max(stop, segment + 1), in_phase)
                last_batch = layout.batch[stop - 1]
                stop = int(np.searchsorted(layout.batch, last_batch, side="right"))
                stop = min(stop, in_phase)
                yield _interleave(np, layout, handles, sizes, segment, stop)
                segment = stop
        finally:
            for handle in handles.values():
                handle.close()


def _interleave(
    np: Any, layout: _Layout, handles: dict[int, Any], sizes: Any, first: int, stop: int
) -> Any:
    """Segments [first, stop) of the global sequence, each rank's IDs read in one piece."""
    ranks = layout.rank[first:stop]
    block_sizes = sizes[first:stop]
    out_end = np.cumsum(block_sizes)
    out = np.empty(int(out_end[-1]), dtype="<i8")
    out_start = out_end - block_sizes
    for rank, handle in handles.items():
        mine = ranks == rank
        if not mine.any():
            continue
        count = int(block_sizes[mine].sum())
        values = np.fromfile(handle, dtype="<i8", count=count)
        mine_sizes = block_sizes[mine]
        source_start = np.cumsum(mine_sizes) - mine_sizes
        if len(handles) == 1:
            out[:] = values
        elif np.all(mine_sizes == mine_sizes[0]) and np.all(
            np.diff(out_start[mine]) == len(handles) * mine_sizes[0]
        ):
            # Every rank's batches the same size: one strided copy, no index arrays.
            width = int(mine_sizes[0])
            target = np.lib.stride_tricks.as_strided(
                out[int(out_start[mine][0]) :],
                shape=(len(values) // width, width),
                strides=(len(handles) * width * 8, 8),
                writeable=True,
            )
            target[...] = values.reshape(-1, width)
        else:
            offsets = np.repeat(out_start[mine] - source_start, mine_sizes)
            out[offsets + np.arange(count)] = values
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
    np: Any, reference: _Layout, run: _Layout, batch: int, max_examples: int
) -> tuple[MovedId, ...]:
    """The reference IDs of global batch `batch` that the run did not consume at their position."""
    first = int(np.searchsorted(reference.batch, batch, side="left"))
    stop = int(np.searchsorted(reference.batch, batch, side="right"))
    start = int(reference.end[first - 1]) if first else 0
    end = int(reference.end[stop - 1])
    expected = _slice(np, reference, start, end)
    consumed = _slice(np, run, start, min(end, run.length))
    consumed = np.concatenate([consumed, np.full(end - start - len(consumed), -1, "<i8")])
    moved_positions = np.flatnonzero(expected != consumed)[:max_examples]
    ids = expected[moved_positions]
    where = _positions_of(np, run, ids)
    examples = []
    for offset, sample_id in zip(moved_positions.tolist(), ids.tolist(), strict=True):
        found = where.get(sample_id)
        located = run.locate(np, found)[:4] if found is not None else (None, None, None, None)
        examples.append(MovedId(sample_id, batch, offset, *located))
    return tuple(examples)


def _slice(np: Any, layout: _Layout, start: int, end: int) -> Any:
    """Positions [start, end) of the layout's global sequence, read segment by segment."""
    pieces = []
    segment = int(np.searchsorted(layout.end, start, side="right"))
    while segment < len(layout.end) and start < end:
        segment_start = int(layout.end[segment - 1]) if segment else 0
        stop = min(end, int(layout.end[segment]))
        record = layout.ranks[int(layout.phase[segment])][int(layout.rank[segment])]
        offset = int(layout.rank_start[segment]) + start - segment_start
        assert record is not None  # a segment exists only where a rank recorded IDs
        pieces.append(np.fromfile(record.path, dtype="<i8", count=stop - start, offset=8 * offset))
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
    if position < reference.length:
        batch, in_batch, *_ = reference.locate(np, position)
    else:  # the run consumed more than the reference: locate in the run's own batches
        batch, in_batch, *_ = run.locate(np, position)
    phase = rank = step = None
    if position < run.length:
        _batch, _in_batch, phase, rank, rank_position = run.locate(np, position)
        record = run.ranks[phase][rank]
        step = consumption_steps(record.path).step_at(rank_position) if record else None
    moved = _moved(np, reference, run, batch, max_examples) if position < reference.length else ()
    taken = _slice(np, run, position, position + 1)
    wanted = _slice(np, reference, position, position + 1)
    where = f"epoch {epoch}, global batch {batch}, position {in_batch}"
    if phase is not None:
        where += f" ({_phase_name(phase, count)} on {world_sizes[phase]} ranks, rank {rank}"
        where += f", during step {step})" if step is not None else ")"
    baseline_text = (
        f"ID {int(wanted[0])} at {where.split(' (')[0]}"
        if len(wanted)
        else f"no more IDs after {reference.length} in epoch {epoch}"
    )
    candidate_text = (
        f"ID {int(taken[0])} at {where}{_repeat_text(np, run, taken, position)}"
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
        f"the global sample sequence parts from the reference's at {where}",
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


def _repeat_text(np: Any, run: _Layout, taken: Any, position: int) -> str:
    """', consumed again: first at …' when the run consumed this ID earlier in the epoch."""
    first = _positions_of(np, run, taken).get(int(taken[0]), position)
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
