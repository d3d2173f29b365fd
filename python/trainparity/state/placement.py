"""Where a rank's local shard of a sharded tensor (DTensor, ShardedTensor) sits in the global tensor."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ShardPlacement"]

KINDS = ("dtensor", "sharded_tensor")


@dataclass(frozen=True)
class ShardPlacement:
    """A local shard's place: enough to compare shard by shard, or to reassemble the global tensor.

    `kind` is "dtensor" or "sharded_tensor"; `mesh_shape` the device mesh
    (a ShardedTensor's is the number of shards); `placements` the rendered
    placement per mesh dimension (`Shard(dim=0)`, `Replicate()`,
    `Partial(sum)`; a ShardedTensor's sharding spec); `coordinate` this
    rank's place in the mesh; `global_shape` the whole tensor's shape and
    `offsets` where the local shard starts in it, per dimension. Two ranks of
    one run share everything but `coordinate` and `offsets`; the same rank
    of two runs with the same layout shares all of it.
    """

    kind: str
    mesh_shape: tuple[int, ...]
    placements: tuple[str, ...]
    coordinate: tuple[int, ...]
    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]

    @property
    def layout(self) -> tuple[Any, ...]:
        """What every rank of one run shares: two recordings with equal layouts compare shard by shard."""
        return (self.kind, self.mesh_shape, self.placements, self.global_shape)

    def describe(self) -> str:
        mesh = "x".join(str(size) for size in self.mesh_shape)
        return (
            f"{self.kind} mesh {mesh} [{', '.join(self.placements)}] at {list(self.coordinate)}, "
            f"global shape {list(self.global_shape)}, offsets {list(self.offsets)}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mesh_shape": list(self.mesh_shape),
            "placements": list(self.placements),
            "coordinate": list(self.coordinate),
            "global_shape": list(self.global_shape),
            "offsets": list(self.offsets),
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
        )
        if len(placement.offsets) != len(placement.global_shape):
            raise ValueError("shard offsets and global shape have different ranks")
        return placement


def _sizes(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value
    ):
        raise ValueError(f"malformed size list {value!r} in a shard placement")
    return tuple(value)
