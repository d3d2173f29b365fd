"""A multi-rank candidate whose state is sharded (FSDP2): judged on global tensors, not on rank 0.

Under DDP every rank holds the whole model, so rank 0 stands for the
candidate and the ranks must hold equal parameters. Under FSDP2
(`fully_shard`) each rank holds its own shard of every parameter, gradient
and optimizer moment (DTensors, frozen as the local shard and its
placement). The candidate is then each phase's global state, reassembled
from every rank's shards (state/reassembly.py), and the ranks' agreement
covers what they all hold whole: unsharded tensors and values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenSequence,
    FrozenTensor,
    FrozenValue,
)
from trainparity._internal.state.reassembly import ReassemblyError, global_state, holds_shards
from trainparity._internal.state.snapshot import Snapshot

__all__ = ["SHARDED_COMPARISON", "ReassemblyError", "global_views", "holds_shards", "unsharded"]

SHARDED_COMPARISON = (
    "candidate: global tensors, reassembled from every rank's shards; ranks.parameters "
    "compares the unsharded tensors only (each rank holds its own shard of the others); "
    "ranks.gradient_syncs is not counted (FSDP2 has no communication hook to count with)"
)
"""What the report's `compared_on` says when the candidate's ranks held shards."""

Views = Mapping[str, Snapshot]


def global_views(rank_views: Sequence[Views]) -> dict[str, Snapshot]:
    """Each phase's global snapshot from every rank's (in rank order); ReassemblyError if impossible."""
    first = rank_views[0]
    return {
        phase: Snapshot(
            first[phase].step,
            global_state([views[phase].state for views in rank_views]),  # type: ignore[arg-type]
            first[phase].backend,
        )
        for phase in first
    }


def unsharded(snapshot: Snapshot) -> Snapshot:
    """`snapshot` without its sharded tensors: what every rank must hold alike."""
    kept = _without_shards(snapshot.state)
    assert isinstance(kept, FrozenMapping)
    return Snapshot(snapshot.step, kept, snapshot.backend)


def _without_shards(value: FrozenValue) -> FrozenValue:
    if isinstance(value, FrozenMapping):
        return FrozenMapping(
            tuple(
                (key, _without_shards(item))
                for key, item in value.entries
                if not (isinstance(item, FrozenTensor) and item.placement is not None)
            )
        )
    if isinstance(value, FrozenSequence):
        # A sequence keeps its length: a shard in it becomes None on every rank alike.
        return FrozenSequence(
            value.kind,
            tuple(
                None
                if isinstance(item, FrozenTensor) and item.placement is not None
                else _without_shards(item)
                for item in value.items
            ),
        )
    return value
