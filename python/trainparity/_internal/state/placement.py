"""Where a rank's local shard of a sharded tensor (DTensor, ShardedTensor) sits in the global tensor.

A tensor no torch type describes (a ZeRO optimizer's fragment) gets its
placement from the caller: PlacedShard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["IndexRuns", "PlacedShard", "ShardPlacement"]

# "zero_fragment": a ZeRO optimizer rank's 1-D fragment of a flattened parameter.
KINDS = ("dtensor", "sharded_tensor", "zero_fragment")

# (tensor dimension, ((first global index, length), ...)): where a strided shard's
# rows along that dimension come from, run by run, in the local shard's order.
IndexRuns = tuple[tuple[int, tuple[tuple[int, int], ...]], ...]


@dataclass(frozen=True)
class ShardPlacement:
    """A local shard's place: enough to compare shard by shard, or to reassemble the global tensor.

    `kind` is "dtensor", "sharded_tensor" or "zero_fragment"; `mesh_shape`
    the device mesh (a ShardedTensor's is the number of shards, a ZeRO
    fragment's the partition group's size); `placements` the rendered
    placement per mesh dimension (`Shard(dim=0)`, `Replicate()`,
    `Partial(sum)`; a ShardedTensor's sharding spec); `coordinate` this
    rank's place in the mesh; `global_shape` the whole tensor's shape and
    `offsets` where the local shard starts in it, per dimension. Two ranks of
    one run share everything but `coordinate`, `offsets` and `index_runs`;
    the same rank of two runs with the same layout shares all of it.

    `index_runs` is empty for a shard that is one block at `offsets` (every
    placement but a strided one). A `_StridedShard` (FSDP2 over a
    tensor-parallel dimension) interleaves: the local rows along such a
    dimension are several runs of the global ones, listed there per
    dimension; `offsets` then holds each run list's first index.
    """

    kind: str
    mesh_shape: tuple[int, ...]
    placements: tuple[str, ...]
    coordinate: tuple[int, ...]
    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]
    index_runs: IndexRuns = ()

    @property
    def layout(self) -> tuple[Any, ...]:
        """What every rank of one run shares: two recordings with equal layouts compare shard by shard."""
        return (self.kind, self.mesh_shape, self.placements, self.global_shape)

    def describe(self) -> str:
        mesh = "x".join(str(size) for size in self.mesh_shape)
        strided = "".join(
            f", dim {dim} rows {', '.join(f'{start}..{start + length - 1}' for start, length in runs)}"
            for dim, runs in self.index_runs
        )
        return (
            f"{self.kind} mesh {mesh} [{', '.join(self.placements)}] at {list(self.coordinate)}, "
            f"global shape {list(self.global_shape)}, offsets {list(self.offsets)}{strided}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mesh_shape": list(self.mesh_shape),
            "placements": list(self.placements),
            "coordinate": list(self.coordinate),
            "global_shape": list(self.global_shape),
            "offsets": list(self.offsets),
            # Only a strided shard has the key: no other placement needs it to be rebuilt.
            **(
                {
                    "index_runs": [
                        [dim, [list(run) for run in runs]] for dim, runs in self.index_runs
                    ]
                }
                if self.index_runs
                else {}
            ),
        }

    @classmethod
    def from_json(cls, entry: Any) -> ShardPlacement:
        """The placement a file recorded; ValueError when it is malformed (the file is untrusted)."""
        if not isinstance(entry, dict) or entry.get("kind") not in KINDS:
            raise ValueError(f"malformed shard placement {entry!r}")
        placements = entry.get("placements")
        if not isinstance(placements, list) or not all(isinstance(p, str) for p in placements):
            raise ValueError(f"malformed shard placements {placements!r}")
        placement = cls(
            kind=entry["kind"],
            mesh_shape=_sizes(entry.get("mesh_shape")),
            placements=tuple(placements),
            coordinate=_sizes(entry.get("coordinate")),
            global_shape=_sizes(entry.get("global_shape")),
            offsets=_sizes(entry.get("offsets")),
            index_runs=_index_runs(entry.get("index_runs", [])),
        )
        if len(placement.offsets) != len(placement.global_shape):
            raise ValueError("shard offsets and global shape have different ranks")
        for dim, runs in placement.index_runs:
            if dim >= len(placement.global_shape) or any(
                start + length > placement.global_shape[dim] for start, length in runs
            ):
                raise ValueError(f"shard index runs {runs!r} outside dimension {dim}")
        return placement


def _sizes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    ):
        raise ValueError(f"malformed size list {value!r} in a shard placement")
    return tuple(value)


def _index_runs(value: Any) -> IndexRuns:
    if not isinstance(value, list):
        raise ValueError(f"malformed shard index runs {value!r}")
    parsed = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], list):
            raise ValueError(f"malformed shard index runs {item!r}")
        (dim,) = _sizes([item[0]])
        runs = tuple(_sizes(run) for run in item[1])
        if any(len(run) != 2 for run in runs):
            raise ValueError(f"malformed shard index runs {item!r}")
        parsed.append((dim, tuple((start, length) for start, length in runs)))
    return tuple(parsed)


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
