"""Snapshot tensors recorded as references to checkpoint files, not copied (formats 2 and 3).

References (format 2): a tensor whose memory was mapped from a checkpoint
file named by the writer (`reference_files`, e.g. after
`torch.load(mmap=True)`) is not copied. Its manifest entry holds
`"reference": {"path", "offset"}` instead of a safetensors header entry, once
the writer has checked that the file's bytes there digest to the tensor's
digest. A reader maps that file range and always verifies it against the
digest, whatever `trust_digests` says: the checkpoint is not ours, so a file
changed after observation is an error. Files without references keep format
1; a reader that knows format 1 only refuses format 2 by its format name.

References of several pieces (format 3): a tensor a loader assembled from
file ranges (a DCP entry sharded by rows: checkpoints/dcp.py) holds
`"reference": {"pieces": [{"path", "offset", "length"}, ...]}`, its bytes
being the pieces' bytes one after the other and its digest theirs. The
writer digests the pieces from the files, streaming (the digest is taken
chunk by chunk, so only a chunk that straddles two pieces is copied); the
reader copies a tensor's pieces into an unnamed temporary file beside the
snapshot (in the kernel: copy_file_range), maps it and verifies that copy on
every read, so the bytes compared are the bytes verified and its resident
memory stays flat. Only files with such an entry are format 3.

snapshot_file.py writes and reads the snapshot itself; this module holds
the writer's confirmation of a reference and the reader's mapping of the
referenced files.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.error_text import error_text
from trainparity._internal.native.core import core
from trainparity._internal.native.cuda import core_threads, digest_buffer
from trainparity._internal.state.file_ranges import FilePiece, FileRange
from trainparity._internal.state.freeze import FrozenTensor
from trainparity._internal.state.tree_codec import SnapshotFileError

__all__ = [
    "VERIFY_BLOCK_BYTES",
    "CheckpointMaps",
    "confirmed_reference",
    "reference_entry",
    "release_pages",
]

# Verification reads a file in blocks of whole digest chunks, releasing each block's pages.
VERIFY_BLOCK_BYTES = 32 << 20


# Writing: a reference is recorded only once the file's bytes are confirmed -----------------


def confirmed_reference(tensor: FrozenTensor, digest: bytes) -> FileRange | None:
    """`tensor.source` when the file's bytes there digest to `digest` (the tensor's), else None.

    A private mapping's page that the observer wrote to holds the observed
    value, not the file's: such a tensor, or one whose file changed since it
    was mapped, is copied into the snapshot instead. A source whose pages
    are known unwritten (file_ranges.py) holds the file's bytes: the digest
    of the tensor is theirs, and the file is not read again.
    """
    source = tensor.source
    if source is None:
        return None
    if source.pieces:
        return source if _pieces_digest(source.pieces, tensor.nbytes) == digest else None
    if source.unwritten:
        return source
    try:
        with open(source.path, "rb") as stream:
            mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        if source.offset + tensor.nbytes > len(mapped):
            return None
        with memoryview(mapped)[source.offset : source.offset + tensor.nbytes] as view:
            matches = digest_buffer(view)[0] == digest
    finally:
        mapped.close()
    return source if matches else None


def _pieces_digest(pieces: Sequence[FilePiece], nbytes: int) -> bytes | None:
    """The digest of the pieces' file bytes one after the other, None when a file is short."""
    if sum(piece.length for piece in pieces) != nbytes:
        return None
    maps: dict[str, mmap.mmap] = {}
    try:
        for piece in pieces:
            if piece.path not in maps:
                with open(piece.path, "rb") as stream:
                    maps[piece.path] = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
            if not 0 <= piece.offset <= piece.offset + piece.length <= len(maps[piece.path]):
                return None
        ranges = [(maps[piece.path], piece.offset, piece.length) for piece in pieces]
        return _digest_of_ranges(ranges, nbytes, core.DIGEST_VERSION)
    except (OSError, ValueError):  # a file gone, or empty (cannot be mapped)
        return None
    finally:
        for file in maps.values():
            file.close()


def _digest_of_ranges(
    ranges: Sequence[tuple[mmap.mmap, int, int]], nbytes: int, version: int
) -> bytes:
    """The digest of the mapped ranges' bytes one after the other, read where they lie.

    The digest is a root over fixed-size chunks, so it is taken range by
    range: only a chunk that straddles two ranges is assembled (at most one
    chunk is copied per boundary). Each range's pages are released from this
    process after digesting (they stay in the page cache).
    """
    chunk = core.DIGEST_CHUNK_BYTES
    chunk_digests = bytearray()
    carry = bytearray()  # the start of a chunk that the next range completes
    done = 0  # bytes digested so far, always whole chunks
    for file, offset, length in ranges:
        with memoryview(file)[offset : offset + length] as view:
            start = 0
            if carry:
                start = min(chunk - len(carry), len(view))
                carry += view[:start]
                if len(carry) == chunk:
                    chunk_digests += core.digest_chunks(
                        bytes(carry), first_chunk=done // chunk, version=version
                    )
                    done += chunk
                    carry = bytearray()
            whole = (len(view) - start) // chunk * chunk
            for block_start in range(start, start + whole, VERIFY_BLOCK_BYTES):
                block_end = min(block_start + VERIFY_BLOCK_BYTES, start + whole)
                with view[block_start:block_end] as block:
                    chunk_digests += core.digest_chunks(
                        block,
                        first_chunk=done // chunk,
                        threads=core_threads(len(block)),
                        version=version,
                    )
                done += block_end - block_start
            carry += view[start + whole :]
        release_pages(file, offset, offset + length)
    if carry:
        chunk_digests += core.digest_chunks(
            bytes(carry), first_chunk=done // chunk, version=version
        )
    return core.digest_root(bytes(chunk_digests), nbytes, version=version)


def reference_entry(reference: FileRange | None) -> dict[str, Any]:
    """The tensor table's `reference` key, only for a tensor recorded by reference."""
    if reference is None:
        return {}
    if reference.pieces:
        pieces = [
            {"path": piece.path, "offset": piece.offset, "length": piece.length}
            for piece in reference.pieces
        ]
        return {"reference": {"pieces": pieces}}
    return {"reference": {"path": reference.path, "offset": reference.offset}}


# Reading: the referenced files, mapped once each --------------------------------------


class CheckpointMaps:
    """The checkpoint files a format-2 snapshot refers to, each memory-mapped once."""

    def __init__(self, snapshot: Path) -> None:
        self.snapshot = snapshot
        self.maps: dict[str, mmap.mmap] = {}
        # Tensor name -> the mapped file its pieces were copied into (None: in memory).
        self.assemblies: dict[str, mmap.mmap | None] = {}

    def paths(self) -> list[str]:
        return sorted(self.maps)

    def mapped(self, path: str) -> mmap.mmap:
        if path not in self.maps:
            try:
                with open(path, "rb") as stream:
                    self.maps[path] = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as error:  # ValueError: an empty file cannot be mapped
                raise SnapshotFileError(
                    f"snapshot file {self.snapshot} refers to checkpoint {path}, which cannot be "
                    f"read ({error_text(error)}); such a snapshot needs its checkpoint files in "
                    "place and unchanged"
                ) from None
        return self.maps[path]

    def view(self, reference: Any, nbytes: int, name: str) -> memoryview:
        """The referenced range of `nbytes` bytes, checked to lie inside its file."""
        if not isinstance(reference, dict):
            raise SnapshotFileError(f"tensor {name!r} has a malformed reference")
        path, offset = reference.get("path"), reference.get("offset")
        if not isinstance(path, str) or not isinstance(offset, int) or isinstance(offset, bool):
            raise SnapshotFileError(f"tensor {name!r} has a malformed reference")
        file = self.mapped(path)
        if not 0 <= offset <= offset + nbytes <= len(file):
            raise SnapshotFileError(
                f"tensor {name!r} refers to bytes [{offset}, {offset + nbytes}) of checkpoint "
                f"{path}, which has {len(file)} bytes: the checkpoint changed after it was observed"
            )
        return memoryview(file)[offset : offset + nbytes]

    def assembled(self, reference: dict, nbytes: int, name: str) -> memoryview:
        """The referenced pieces' bytes one after the other, copied into a file of their own.

        A copy made when the snapshot is read, since the pieces lie at
        unrelated offsets of several files: into an unnamed temporary file
        beside the snapshot (else in the temporary directory, else in memory),
        kernel to kernel (`copy_file_range`), and mapped read-only like the
        snapshot itself. So the reader's resident memory stays flat (the
        verification releases the pages it digested), and the bytes compared
        are the ones verified: the copy, not files that could change later.
        """
        ranges = self._checked_pieces(reference, nbytes, name)
        assembly = _assembly_file(self.snapshot.parent, nbytes)
        if assembly is not None:
            try:
                with assembly:
                    position = 0
                    for path, offset, length in ranges:
                        _copy_range(self.maps[path], path, offset, length, assembly, position)
                        release_pages(self.maps[path], offset, offset + length)
                        position += length
                    mapped = mmap.mmap(assembly.fileno(), 0, access=mmap.ACCESS_READ)
                self.assemblies[name] = mapped
                return memoryview(mapped)
            except OSError:  # e.g. the disk filled up: in memory instead
                pass
        buffer = memoryview(bytearray(nbytes))
        position = 0
        for path, offset, length in ranges:
            with memoryview(self.maps[path])[offset : offset + length] as piece:
                buffer[position : position + length] = piece  # one memcpy, no bytes object
            position += length
        self.assemblies[name] = None
        return buffer.toreadonly()

    def _checked_pieces(
        self, reference: dict, nbytes: int, name: str
    ) -> list[tuple[str, int, int]]:
        """The referenced pieces of `nbytes` bytes in all, each checked to lie inside its file."""
        pieces = reference.get("pieces")
        if not isinstance(pieces, list) or not pieces or len(reference) != 1:
            raise SnapshotFileError(f"tensor {name!r} has a malformed piece list")
        checked = []
        for piece in pieces:
            if not isinstance(piece, dict) or set(piece) != {"path", "offset", "length"}:
                raise SnapshotFileError(f"tensor {name!r} has a malformed piece list")
            path, offset, length = piece["path"], piece["offset"], piece["length"]
            if (
                not isinstance(path, str)
                or any(type(number) is not int for number in (offset, length))
                or length <= 0
            ):
                raise SnapshotFileError(f"tensor {name!r} has a malformed piece list")
            checked.append((path, offset, length))
        held = sum(length for _, _, length in checked)
        if held != nbytes:
            raise SnapshotFileError(
                f"tensor {name!r} records {nbytes} bytes but its pieces hold {held}"
            )
        for path, offset, length in checked:
            file = self.mapped(path)
            if not 0 <= offset <= offset + length <= len(file):
                raise SnapshotFileError(
                    f"tensor {name!r} refers to bytes [{offset}, {offset + length}) of checkpoint "
                    f"{path}, which has {len(file)} bytes: the checkpoint changed after it was "
                    "observed"
                )
        return checked


def _assembly_file(beside: Path, nbytes: int) -> Any:
    """An unnamed temporary file for `nbytes` of assembled pieces, or None when none can be made."""
    for directory in (beside, None):
        try:
            stream = tempfile.TemporaryFile(dir=directory, prefix="trainparity-pieces-")
        except OSError:
            continue
        try:
            os.ftruncate(stream.fileno(), nbytes)
        except OSError:
            stream.close()
            continue
        return stream
    return None


def _copy_range(
    source: mmap.mmap, path: str, offset: int, length: int, target: Any, position: int
) -> None:
    """Copy `length` bytes at `offset` of checkpoint `path` to `position` of `target`.

    `copy_file_range` copies in the kernel (no page of either file enters
    this process); where it is refused (another file system on old kernels,
    no such call), the bytes are written from the checkpoint's mapping.
    """
    done = 0
    try:
        with open(path, "rb") as stream:
            while done < length:
                copied = os.copy_file_range(
                    stream.fileno(), target.fileno(), length - done, offset + done, position + done
                )
                if copied <= 0:
                    break
                done += copied
    except (OSError, AttributeError):
        pass
    with memoryview(source)[offset + done : offset + length] as rest:
        written = 0
        while written < len(rest):
            written += os.pwrite(target.fileno(), rest[written:], position + done + written)


def release_pages(mapped: mmap.mmap, start: int, end: int) -> None:
    """Drop the whole pages inside [start, end) from this process's resident set (best effort)."""
    first = -(-start // mmap.PAGESIZE) * mmap.PAGESIZE
    last = min(end, len(mapped)) // mmap.PAGESIZE * mmap.PAGESIZE
    if last > first and hasattr(mapped, "madvise"):
        with contextlib.suppress(OSError, ValueError):
            mapped.madvise(mmap.MADV_DONTNEED, first, last - first)
