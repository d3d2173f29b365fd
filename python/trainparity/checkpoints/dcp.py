"""load_dcp: a torch.distributed.checkpoint directory read in one process, without a process group.

The directory's metadata says every entry's global shape and dtype; one CPU
tensor per entry is allocated from it and `dcp.load(..., no_dist=True)` reads
the shards of every rank straight into those tensors (resharding included),
so nothing is copied through a temporary `torch.save` file. Non-tensor entries
(saved as bytes: learning rates, step counters, param_groups) are read with
`torch.load(weights_only=True)` unless the caller allows pickles. The flat
keys DCP stores (`optim.state.weight.exp_avg`) are put back into the nesting
the saving code used, from the metadata's `planner_data`.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

__all__ = ["load_dcp"]


def load_dcp(
    path: str | os.PathLike[str],
    *,
    keys: Iterable[str] | None = None,
    weights_only: bool = True,
) -> dict[str, Any]:
    """The state saved in DCP directory `path`, as a nested dict of CPU tensors and plain values.

    `keys` limits the read to top-level keys (`{"model"}`) or any dotted
    prefix of a stored key (`"optim.state"`); None reads everything. Sharded
    entries (DTensor/ShardedTensor from FSDP or TP) come back whole. Lists
    saved inside the state (e.g. `param_groups`) come back as lists.
    `weights_only=False` lets non-tensor entries be unpickled (only for
    checkpoints you trust).
    """
    directory = Path(path)
    if not (directory / ".metadata").is_file():
        raise FileNotFoundError(
            f"{str(directory)!r} is not a DCP checkpoint directory (no .metadata)"
        )
    reader = dcp.FileSystemReader(directory)
    metadata = reader.read_metadata()
    wanted = (
        None if keys is None else {str(key) for key in ([keys] if isinstance(keys, str) else keys)}
    )
    nesting = metadata.planner_data or {}
    flat: dict[str, Any] = {}
    for key, entry in sorted(metadata.state_dict_metadata.items()):
        path_of_key = tuple(nesting.get(key, (key,)))
        if wanted is not None and not _selected(key, path_of_key, wanted):
            continue
        if isinstance(entry, TensorStorageMetadata):
            flat[key] = torch.empty(entry.size, dtype=entry.properties.dtype)
        else:
            flat[key] = None  # filled from its bytes by the planner
    planner = _BytesPlanner(weights_only=weights_only)
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(flat, storage_reader=reader, planner=planner, no_dist=True)
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        _set(nested, tuple(nesting.get(key, (key,))), value)
    return _lists_restored(nested)


def _selected(key: str, path_of_key: tuple[Any, ...], wanted: set[str]) -> bool:
    prefixes = {
        ".".join(str(part) for part in path_of_key[: n + 1]) for n in range(len(path_of_key))
    }
    return key in wanted or bool(prefixes & wanted)


class _BytesPlanner(DefaultLoadPlanner):
    """The default load planner, on a flat state dict, reading bytes entries with weights_only."""

    def __init__(self, *, weights_only: bool) -> None:
        super().__init__(flatten_state_dict=False, flatten_sharded_tensors=False)
        self.weights_only = weights_only

    def load_bytes(self, read_item: Any, value: io.BytesIO) -> None:
        self.original_state_dict[read_item.dest_index.fqn] = torch.load(
            value, weights_only=self.weights_only
        )


def _set(root: dict[Any, Any], path: tuple[Any, ...], value: Any) -> None:
    node = root
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value


def _lists_restored(node: Any) -> Any:
    """Dicts whose keys are exactly 0..n-1 (ints) were lists when saved."""
    if not isinstance(node, dict):
        return node
    restored = {key: _lists_restored(value) for key, value in node.items()}
    if restored and all(type(key) is int for key in restored):
        if sorted(restored) == list(range(len(restored))):
            return [restored[index] for index in range(len(restored))]
    return restored
