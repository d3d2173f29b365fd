"""load_dcp: a torch.distributed.checkpoint directory read in one process, without a process group.

The directory's metadata says every entry's global shape and dtype; one CPU
tensor per entry is allocated from it and `dcp.load(..., no_dist=True)` reads
the shards of every rank straight into those tensors (resharding included),
so nothing is copied through a temporary `torch.save` file. Non-tensor entries
(saved as bytes: learning rates, step counters, param_groups) are read with
`torch.load(weights_only=True)` unless the caller allows pickles. The flat
keys DCP stores (`optim.state.weight.exp_avg`) are put back into the nesting
the saving code used, from the metadata's `planner_data`.

With `mmap=True` an entry stored whole in one shard file (what an unsharded
or replicated tensor becomes) is not read at all: the shard file is mapped
copy-on-write, as `torch.load(mmap=True)` maps a file, and the entry is a
view of its bytes there. A snapshot of such a state refers to the shard
file's byte ranges instead of copying them (state/snapshot_references.py). An
entry sharded over several chunks by rows (FSDP's Shard(0): each rank's chunk
a range of whole rows, so the global tensor's bytes are the chunks' bytes in
row order) is assembled from the mapped chunks into one tensor, and its
pieces (file, offset, length per chunk) are registered for the snapshot
writer (file_ranges.register_pieces), which refers to them instead of copying.
Other sharded entries (column chunks, or any that do not tile the tensor by
whole rows) are read by `dcp.load`.
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
from torch.distributed.checkpoint.utils import _create_file_view

from trainparity._internal.state.file_ranges import FilePiece, register_pieces

__all__ = ["assembled_row_entries", "load_dcp", "mapped_whole_entries"]


def load_dcp(
    path: str | os.PathLike[str],
    *,
    keys: Iterable[str] | None = None,
    weights_only: bool = True,
    mmap: bool = False,
) -> dict[str, Any]:
    """The state saved in DCP directory `path`, as a nested dict of CPU tensors and plain values.

    `keys` limits the read to top-level keys (`{"model"}`) or any dotted
    prefix of a stored key (`"optim.state"`); None reads everything. Sharded
    entries (DTensor/ShardedTensor from FSDP or TP) come back whole. Lists
    saved inside the state (e.g. `param_groups`) come back as lists.
    `weights_only=False` lets non-tensor entries be unpickled (only for
    checkpoints you trust). `mmap=True` maps shard files instead of reading
    them: an entry stored whole in one shard is a copy-on-write view of that
    file (possibly not aligned to its element size), so the file must stay
    in place and unchanged while the state is in use. An entry sharded by
    rows is assembled from the mapped chunks (a copy, as `dcp.load` makes)
    and remembered as the file pieces it came from, for snapshot references.
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
    mapped: dict[str, torch.Tensor] = {}
    if mmap:
        files: dict[str, Any] = {}
        mapped = mapped_whole_entries(directory, metadata, flat, files)
        rest = {key: value for key, value in flat.items() if key not in mapped}
        mapped |= assembled_row_entries(directory, metadata, rest, files)
    unread = {key: value for key, value in flat.items() if key not in mapped}
    if unread:
        planner = _BytesPlanner(weights_only=weights_only)
        with warnings.catch_warnings():  # "assuming the intent is to load in a single process"
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(unread, storage_reader=reader, planner=planner, no_dist=True)
    nested: dict[str, Any] = {}
    for key in flat:
        value = mapped[key] if key in mapped else unread[key]
        _set(nested, tuple(nesting.get(key, (key,))), value)
    return _lists_restored(nested)


def mapped_whole_entries(
    directory: Path, metadata: Any, wanted: dict[str, Any], files: dict[str, Any] | None = None
) -> dict[str, torch.Tensor]:
    """The tensor entries among `wanted` stored whole in one chunk, as views of their mapped shard files.

    A DCP shard file holds each chunk as a `torch.save` archive at the
    offset the metadata gives; its tensor bytes lie stored (uncompressed)
    inside it. Each shard file is mapped once (private, copy-on-write, like
    `torch.load(mmap=True)`), and each chunk's archive is unpickled with
    torch's weights-only unpickler onto that mapping, so no tensor byte is
    read here. An entry that is sharded over several chunks, transformed
    (compressed) on save, or that does not unpickle to a tensor of the
    metadata's dtype and size is left out: the caller reads it through
    `dcp.load`, which copies. `files` holds the shard files mapped so far
    (by path), shared with assembled_row_entries so each is mapped once.
    """
    chunks = _chunks_by_key(metadata)
    files = {} if files is None else files
    found: dict[str, torch.Tensor] = {}
    for key in wanted:
        entry = metadata.state_dict_metadata.get(key)
        stored = chunks.get(key, [])
        if not isinstance(entry, TensorStorageMetadata) or len(stored) != 1:
            continue
        index, info = stored[0]
        if info.transform_descriptors or any(index.offset or ()):
            continue
        tensor = _mapped_chunk(directory / info.relative_path, info, files)
        if (
            isinstance(tensor, torch.Tensor)
            and tensor.dtype == entry.properties.dtype
            and tensor.shape == entry.size
        ):
            found[key] = tensor
    return found


def assembled_row_entries(
    directory: Path, metadata: Any, wanted: dict[str, Any], files: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """The tensor entries among `wanted` sharded by whole rows, assembled from their mapped chunks.

    FSDP2 saves a Shard(0) parameter (and its optimizer moments) as one chunk
    per rank, each a range of whole rows in the rank's shard file, so the
    global tensor's bytes are the chunks' bytes in row order. Each such entry
    is copied into one new tensor from the mapped chunks (one read of its
    bytes, what `dcp.load` costs), and its pieces (shard file, byte offset,
    length per chunk) are registered (file_ranges.register_pieces) so that a
    snapshot refers to them. Chunks that split columns or other dimensions,
    overlap, leave gaps, were transformed on save, or do not unpickle onto
    the mapping as contiguous tensors are left to `dcp.load`.
    """
    found: dict[str, torch.Tensor] = {}
    for key, stored in _chunks_by_key(metadata).items():
        entry = metadata.state_dict_metadata.get(key)
        if key not in wanted or not isinstance(entry, TensorStorageMetadata) or len(stored) < 2:
            continue
        rows = _row_ranges(entry, stored)
        if rows is None:
            continue
        whole = torch.empty(entry.size, dtype=entry.properties.dtype)
        pieces = []
        for first_row, sizes, _, info in rows:
            path = directory / info.relative_path
            chunk = _mapped_chunk(path, info, files) if not info.transform_descriptors else None
            if (
                not isinstance(chunk, torch.Tensor)
                or chunk.dtype != whole.dtype
                or chunk.shape != sizes
                or not chunk.is_contiguous()
            ):
                break
            whole.narrow(0, first_row, chunk.shape[0]).copy_(chunk)
            nbytes = chunk.numel() * chunk.element_size()
            if nbytes:
                offset = chunk.data_ptr() - files[str(path)].data_ptr()
                pieces.append(FilePiece(str(path.absolute()), offset, nbytes))
        else:
            if pieces:
                register_pieces(whole, pieces)
            found[key] = whole
    return found


def _row_ranges(
    entry: TensorStorageMetadata, stored: list[tuple[Any, Any]]
) -> list[tuple[int, torch.Size, Any, Any]] | None:
    """(first row, chunk sizes, index, storage info) of `stored`'s chunks in row order, when
    they tile `entry`'s tensor by whole rows without gaps or overlaps; else None."""
    size = tuple(entry.size)
    if not size:
        return None
    sizes_at = {tuple(chunk.offsets): tuple(chunk.sizes) for chunk in entry.chunks}
    ordered = sorted(stored, key=lambda item: tuple(item[0].offset or ()))
    next_row = 0
    rows = []
    for index, info in ordered:
        offset = tuple(index.offset or ())
        sizes = sizes_at.get(offset)
        if (
            sizes is None
            or len(offset) != len(size)
            or offset[0] != next_row
            or any(offset[1:])
            or sizes[1:] != size[1:]
        ):
            return None
        rows.append((next_row, torch.Size(sizes), index, info))
        next_row += sizes[0]
    return rows if next_row == size[0] else None


def _chunks_by_key(metadata: Any) -> dict[str, list[tuple[Any, Any]]]:
    chunks: dict[str, list[tuple[Any, Any]]] = {}
    for index, info in metadata.storage_data.items():
        chunks.setdefault(index.fqn, []).append((index, info))
    return chunks


def _mapped_chunk(path: Path, info: Any, files: dict[str, Any]) -> Any:
    """The object saved at `info`'s byte range of shard file `path`, its storages on the mapping.

    None when it cannot be read this way (not a zip archive, a torch whose
    private loader differs): the caller then reads it the copying way.
    """
    try:
        if str(path) not in files:
            files[str(path)] = torch.UntypedStorage.from_file(
                str(path), False, os.path.getsize(path)
            )
        whole = files[str(path)]
        if not 0 <= info.offset <= info.offset + info.length <= whole.nbytes():
            return None
        with open(path, "rb") as stream:
            archive = torch._C.PyTorchFileReader(
                _create_file_view(stream, info.offset, info.length)
            )
            return torch.serialization._load(
                archive,
                "cpu",
                torch._weights_only_unpickler,
                overall_storage=whole[info.offset : info.offset + info.length],
            )
    except Exception:  # a layout this reading does not know: dcp.load reads it instead
        return None


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
