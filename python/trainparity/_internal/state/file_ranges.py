"""Where a CPU tensor's bytes lie in a memory-mapped file: the zero-copy references of snapshots.

`torch.load(mmap=True)` (and any reader that maps a file) gives tensors whose
memory is a private mapping of the checkpoint file. Such a tensor need not be
copied into a snapshot: the snapshot can record the file and the byte offset
instead. This module only says where a tensor's memory is mapped from
(Linux's /proc/self/maps), and whether the tensor's memory is still the
file's: a private mapping's page stops following the file once the observer
writes to it (copy-on-write). /proc/self/pagemap tells that per page without
reading the data, so the writer reads each tensor once; where it cannot tell,
snapshot_references.py digests the file's bytes too before it records a reference.

A tensor a loader assembled from several file ranges (a DCP entry sharded
over the ranks' shard files: load_dcp copies each chunk's rows into one
tensor) is no mapping, but its bytes are the concatenation of those ranges.
The loader says so with `register_pieces`; the locator then names the
pieces, and the snapshot writer digests them from the files before it
records a reference of several pieces.
"""

from __future__ import annotations

import mmap
import os
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["FilePiece", "FileRange", "MappedFileLocator", "checkpoint_files", "register_pieces"]

_MAPS = Path("/proc/self/maps")
_PAGEMAP = Path("/proc/self/pagemap")
# pagemap entries read at a time: 8 MiB of entries cover 4 GiB of 4 KiB pages.
_PAGEMAP_ENTRIES_PER_READ = 1 << 20


# A checkpoint directory's files a locator looks for: more is a directory that is no checkpoint.
_MAX_CHECKPOINT_FILES = 100_000


def checkpoint_files(checkpoint: str | os.PathLike[str]) -> list[Path]:
    """The files whose bytes a state loaded from `checkpoint` may be mapped from.

    A file is itself; a directory (DCP shards, safetensors shards, a ZeRO
    tag directory) gives the regular files under it, symbolic links not
    followed.
    """
    path = Path(checkpoint)
    if path.is_file():
        return [path]
    found: list[Path] = []
    for root, _, names in os.walk(path):
        for name in names:
            file = Path(root, name)
            if file.is_file() and not file.is_symlink():
                found.append(file)
                if len(found) >= _MAX_CHECKPOINT_FILES:
                    return found
    return found


@dataclass(frozen=True)
class FileRange:
    """A tensor's bytes at `offset` in the file at absolute `path`.

    `unwritten`: the memory is a mapping of this very file (device and inode)
    and none of its pages was written by the process, so its bytes are the
    file's bytes; False when that is not known.
    """

    path: str
    offset: int
    unwritten: bool = False
    # When set, the tensor's bytes are these ranges one after the other (path and offset
    # are then the first piece's); a single range otherwise.
    pieces: tuple[FilePiece, ...] = ()


@dataclass(frozen=True)
class FilePiece:
    """`length` bytes at `offset` in the file at absolute `path`: one piece of a tensor's bytes."""

    path: str
    offset: int
    length: int


# data_ptr -> (the assembled tensor, weakly; its byte count; its pieces). Weak so that a
# registration never keeps a state alive; a dead or resized entry is ignored and dropped.
_ASSEMBLED: dict[int, tuple[weakref.ref, int, tuple[FilePiece, ...]]] = {}


def register_pieces(tensor: torch.Tensor, pieces: Sequence[FilePiece]) -> None:
    """Say that contiguous CPU `tensor`'s bytes were copied from `pieces`, in order.

    Only a hint for the snapshot writer, which digests the pieces' bytes and
    records a reference only when they equal the tensor's (an observer may
    have changed the tensor since).
    """
    for address, (alive, _, _) in list(_ASSEMBLED.items()):
        if alive() is None:
            del _ASSEMBLED[address]
    nbytes = tensor.numel() * tensor.element_size()
    if nbytes and tensor.is_contiguous() and sum(piece.length for piece in pieces) == nbytes:
        _ASSEMBLED[tensor.data_ptr()] = (weakref.ref(tensor), nbytes, tuple(pieces))


@dataclass(frozen=True)
class _Mapping:
    start: int
    end: int
    file_offset: int
    path: str
    same_file: bool  # matched by device and inode, not only by path


class MappedFileLocator:
    """Finds which of `files` a contiguous CPU tensor's memory is mapped from, and where.

    The process's mappings are read once, when the locator is made: make it
    after the state was loaded and while the state is alive.
    """

    def __init__(self, files: Iterable[str | os.PathLike[str]]) -> None:
        identities: dict[tuple[int, int, int] | str, str] = {}
        for file in files:
            try:
                status = os.stat(file)
            except OSError:
                continue
            device = (os.major(status.st_dev), os.minor(status.st_dev), status.st_ino)
            identities[device] = identities[os.path.realpath(file)] = os.path.abspath(file)
        self.named = {key: name for key, name in identities.items() if isinstance(key, str)}
        self.mappings = _file_mappings(identities) if identities else []

    @classmethod
    def of_mapped_files(cls) -> MappedFileLocator:
        """A locator over every file this process maps writable and private, whichever it is.

        That is how `torch.load(mmap=True)`, safetensors and DCP's mapped reads
        map a file's tensors; record() uses it to copy such a tensor's bytes
        file to file (recording/value_writes.py). A mapping counts as the
        file's only when the path still names the mapped device and inode.
        """
        locator = cls(())
        locator.mappings = _writable_file_mappings()
        return locator

    def locate(self, tensor: torch.Tensor) -> FileRange | None:
        """The file range holding `tensor`'s elements, or None when they are not in one of the files."""
        if tensor.device.type != "cpu" or not tensor.is_contiguous():
            return None
        if tensor.is_conj() or tensor.is_neg():  # the memory holds values before a lazy flip
            return None
        nbytes = tensor.numel() * tensor.element_size()
        address = tensor.data_ptr()
        if nbytes == 0 or address == 0:
            return None
        assembled = self._assembled(address, nbytes)
        if assembled is not None:  # copied from the files' pieces, not mapped from them
            return assembled
        for mapping in self.mappings:
            if mapping.start <= address and address + nbytes <= mapping.end:
                return FileRange(
                    mapping.path,
                    address - mapping.start + mapping.file_offset,
                    unwritten=mapping.same_file and _pages_follow_the_file(address, nbytes),
                )
        return None

    def _assembled(self, address: int, nbytes: int) -> FileRange | None:
        """The pieces registered for the tensor at `address`, when all lie in this locator's files."""
        registered = _ASSEMBLED.get(address)
        if registered is None or registered[0]() is None or registered[1] != nbytes:
            return None
        pieces = []
        for piece in registered[2]:
            name = self.named.get(os.path.realpath(piece.path))
            if name is None:
                return None
            pieces.append(FilePiece(name, piece.offset, piece.length))
        return FileRange(pieces[0].path, pieces[0].offset, pieces=tuple(pieces))


def _pages_follow_the_file(address: int, nbytes: int) -> bool:
    """Whether no page of [address, address + nbytes) was written by this process.

    In a private file mapping a page is absent (read from the file when
    touched), present as a page of the file, or, once written, an anonymous
    page (possibly swapped out). False when the pagemap cannot be read.
    """
    import torch

    first = address // mmap.PAGESIZE
    count = (address + nbytes - 1) // mmap.PAGESIZE - first + 1
    try:
        with open(_PAGEMAP, "rb", buffering=0) as stream:
            for start in range(0, count, _PAGEMAP_ENTRIES_PER_READ):
                entries = min(_PAGEMAP_ENTRIES_PER_READ, count - start)
                buffer = bytearray(entries * 8)
                stream.seek((first + start) * 8)
                if stream.readinto(buffer) != len(buffer):
                    return False
                pages = torch.frombuffer(buffer, dtype=torch.int64)
                present = pages < 0  # bit 63
                swapped = ((pages >> 62) & 1).bool()
                file_page = ((pages >> 61) & 1).bool()
                if bool((swapped | (present & ~file_page)).any()):
                    return False
    except OSError:
        return False
    return True


def _file_mappings(identities: dict[tuple[int, int, int] | str, str]) -> list[_Mapping]:
    """This process's mappings of the files in `identities`, by (major, minor, inode) or by
    real path: overlay file systems show another device in the maps than `stat` gives.
    A wrong match costs nothing but time: the writer checks the file's bytes."""
    try:
        lines = _MAPS.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # not Linux, or /proc not mounted: no range is known, so every tensor is copied
        return []
    found = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6:
            continue  # anonymous memory
        span, _, offset, device, inode = fields[:5]
        major, _, minor = device.partition(":")
        key = (int(major, 16), int(minor, 16), int(inode))
        name = identities.get(key, identities.get(fields[5]))
        if name is None:
            continue
        start, _, end = span.partition("-")
        found.append(
            _Mapping(int(start, 16), int(end, 16), int(offset, 16), name, key in identities)
        )
    return found


def _writable_file_mappings() -> list[_Mapping]:
    """This process's private writable mappings of regular files (a library's data segment too:
    no tensor lies there, so it is never matched)."""
    try:
        lines = _MAPS.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    identities: dict[str, tuple[int, int, int] | None] = {}
    found = []
    for line in lines:
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[1].startswith("rw") or not fields[5].startswith("/"):
            continue
        span, _, offset, device, inode = fields[:5]
        path = fields[5]
        if path not in identities:
            try:
                status = os.stat(path)
                identities[path] = (
                    os.major(status.st_dev),
                    os.minor(status.st_dev),
                    status.st_ino,
                )
            except OSError:  # e.g. "/path (deleted)": no file to copy from
                identities[path] = None
        major, _, minor = device.partition(":")
        mapped = (int(major, 16), int(minor, 16), int(inode))
        start, _, end = span.partition("-")
        found.append(
            _Mapping(
                int(start, 16), int(end, 16), int(offset, 16), path, identities[path] == mapped
            )
        )
    return found
