"""A rank's local piece of a tensor that no torch type describes, with its placement given by the caller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainparity._internal.state.placement import ShardPlacement

if TYPE_CHECKING:
    import torch

__all__ = ["PlacedShard"]


@dataclass(frozen=True)
class PlacedShard:
    """A plain local tensor and where it sits in its global tensor, for record() and compare_states.

    DTensor and ShardedTensor carry their placement; a ZeRO optimizer's
    fragment of a flat parameter partition is a plain tensor whose place only
    the optimizer knows. Wrapping it here lets freeze() record it as a shard:
    compared shard by shard within one layout, reassembled by placement
    across world sizes (state/reassembly.py). `local` is frozen as it is
    (zero-copy where freeze is); its shape must be the one the placement
    implies at `placement.offsets`.
    """

    local: torch.Tensor
    placement: ShardPlacement
