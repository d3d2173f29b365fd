"""One global state from every rank's frozen state: shards put back together, for runs of different world sizes.

Two runs on the same ranks compare shard by shard. A run saved on 2 ranks
and resumed on 1 has no shard in common with it: both are compared on the
global state instead, built here from each rank's state at one step.

- A sharded tensor (one with a ShardPlacement) becomes its global tensor:
  each distinct shard copied in at its offsets, or at its index runs for a
  strided shard (FSDP2 over tensor parallel), on meshes of any number of
  dimensions. Replicas (a Replicate mesh dimension: HSDP's replicate
  dimension, a TP-replicated parameter) hold the same shard and are taken
  once. Partial placements (unreduced sums) and shards that do not cover
  the tensor are a ReassemblyError.
- Where a rank kept only summaries (a summary-mode recording), the global
  tensor cannot be rebuilt: `summaries=True` replaces every tensor by its
  global summary instead (a mapping: count, sum, l2_norm, max_abs,
  nan_count, inf_count), combined from the shards' in float64. Compared
  under a tolerance these say whether the values agree, never where.
- Everything else (scalars, plain tensors) is the lowest rank's: a value
  that differs per rank (an RNG state) has no global meaning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from trainparity._internal.native.dtypes import info_for_text
from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenSequence,
    FrozenTensor,
    FrozenValue,
)
from trainparity._internal.state.paths import StatePath, render_path
from trainparity._internal.state.summaries import TensorSummary

__all__ = ["ReassemblyError", "global_state", "holds_shards"]

SummaryOf = Callable[[int, str], TensorSummary]


class ReassemblyError(ValueError):
    """Rank states that cannot be put together: different structure, Partial shards, gaps."""


def global_state(
    states: Sequence[FrozenValue], *, summaries: SummaryOf | None = None
) -> FrozenValue:
    """The global state of one step from every rank's state (`states` in rank order).

    With `summaries` (called as summaries(rank index, rendered path)) every
    tensor is replaced by its global summary; without, sharded tensors are
    reassembled, which needs every rank's values.
    """
    return _Builder(states, summaries).node(states, ())


class _Builder:
    def __init__(self, states: Sequence[FrozenValue], summaries: SummaryOf | None) -> None:
        self.states = states
        self.summaries = summaries

    def node(self, values: Sequence[FrozenValue], path: StatePath) -> FrozenValue:
        first = values[0]
        if any(type(value) is not type(first) for value in values):
            raise ReassemblyError(f"ranks hold different kinds of value at {render_path(path)}")
        if isinstance(first, FrozenMapping):
            keys = first.keys()
            if any(value.keys() != keys for value in values):  # type: ignore[union-attr]
                raise ReassemblyError(f"ranks hold different keys at {render_path(path)}")
            columns = [value.as_dict() for value in values]  # type: ignore[union-attr]
            return FrozenMapping(
                tuple(
                    (key, self.node([column[key] for column in columns], (*path, key)))
                    for key in keys
                )
            )
        if isinstance(first, FrozenSequence):
            if any(len(value.items) != len(first.items) for value in values):  # type: ignore[union-attr]
                raise ReassemblyError(
                    f"ranks hold sequences of different lengths at {render_path(path)}"
                )
            return FrozenSequence(
                first.kind,
                tuple(
                    self.node([value.items[index] for value in values], (*path, index))  # type: ignore[union-attr]
                    for index in range(len(first.items))
                ),
            )
        if isinstance(first, FrozenTensor):
            return self.tensor(values, path)  # type: ignore[arg-type]
        return first

    def tensor(self, shards: Sequence[FrozenTensor], path: StatePath) -> FrozenValue:
        placement = shards[0].placement
        # One shard per distinct place: replicas (a Replicate mesh dimension) count once.
        ranks = range(len(shards)) if placement is not None else range(1)
        distinct: dict[tuple, int] = {}
        for rank in ranks:
            shard = shards[rank]
            if placement is not None:
                if shard.placement is None or shard.placement.layout != placement.layout:
                    raise ReassemblyError(f"ranks shard {render_path(path)} differently")
                if any("Partial" in text for text in placement.placements):
                    raise ReassemblyError(
                        f"{render_path(path)} is a Partial (unreduced) DTensor: reduce it "
                        "(.redistribute or .full_tensor) before recording it"
                    )
                where = (shard.placement.offsets, shard.shape, shard.placement.index_runs)
                distinct.setdefault(where, rank)
            else:
                distinct[((), shard.shape, ())] = rank
        if self.summaries is not None:
            return self.summary(sorted(distinct.items()), path)
        if placement is None:
            return shards[0]
        return self.reassembled(shards, sorted(distinct.items()), path)

    def reassembled(
        self, shards: Sequence[FrozenTensor], places: list[tuple[tuple, int]], path: StatePath
    ) -> FrozenTensor:
        first = shards[places[0][1]]
        placement = first.placement
        assert placement is not None
        covered = sum(math.prod(shape) for (_, shape, _), _ in places)
        if covered != math.prod(placement.global_shape):
            raise ReassemblyError(
                f"the shards of {render_path(path)} cover {covered} of "
                f"{math.prod(placement.global_shape)} elements"
            )
        import torch  # reassembly builds the global tensor: only where shards differ

        whole = torch.empty(placement.global_shape, dtype=info_for_text(first.dtype).dtype)
        for (offsets, shape, index_runs), rank in places:
            shard = shards[rank]
            if shard.data is None:
                raise ReassemblyError(
                    f"rank {rank} stored no values of {render_path(path)} (a summary step)"
                )
            whole[_region(offsets, shape, dict(index_runs))] = shard.to_tensor()
        captured = FrozenTensor.capture(whole)
        return replace(captured, device=first.device, requires_grad=first.requires_grad)

    def summary(self, places: list[tuple[tuple, int]], path: StatePath) -> FrozenMapping:
        assert self.summaries is not None
        name = render_path(path)
        parts = [self.summaries(rank, name) for _, rank in places]
        combined = {
            "count": sum(part.count for part in parts),
            "inf_count": sum(part.inf_count for part in parts),
            "l2_norm": math.sqrt(math.fsum(part.l2_norm**2 for part in parts)),
            "max_abs": max(part.max_abs for part in parts),
            "nan_count": sum(part.nan_count for part in parts),
            "sum": math.fsum(part.sum for part in parts),
        }
        return FrozenMapping(tuple(sorted(combined.items())))


def _region(offsets: tuple, shape: tuple, runs_by_dim: dict) -> tuple:
    """The index of a shard's elements in the global tensor.

    A block (no strided dimension) is a slice per dimension. A strided shard
    takes its rows along each strided dimension from its runs: one index
    vector per dimension, broadcast against the others (an outer product).
    """
    if not runs_by_dim:
        return tuple(
            slice(offset, offset + size) for offset, size in zip(offsets, shape, strict=True)
        )
    import torch  # only reassembly (which already imported it) gets here

    vectors = []
    for dim, (offset, size) in enumerate(zip(offsets, shape, strict=True)):
        if dim in runs_by_dim:
            rows = [torch.arange(start, start + length) for start, length in runs_by_dim[dim]]
            vector = torch.cat(rows) if rows else torch.arange(0)
        else:
            vector = torch.arange(offset, offset + size)
        vectors.append(vector.view([-1] + [1] * (len(shape) - dim - 1)))
    return tuple(vectors)


def holds_shards(value: FrozenValue) -> bool:
    """Whether any tensor in `value` is a rank's shard of a sharded tensor."""
    if isinstance(value, FrozenTensor):
        return value.placement is not None
    if isinstance(value, FrozenMapping):
        return any(holds_shards(item) for _, item in value.entries)
    if isinstance(value, FrozenSequence):
        return any(holds_shards(item) for item in value.items)
    return False
