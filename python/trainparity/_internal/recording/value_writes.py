"""record()'s full-mode tensor bytes, written with one kernel copy each and no copy of ours.

A host tensor's memory goes to the kernel as it is: the values of a step are
gathered as memoryviews (with their 8-byte padding) and handed to `writev`,
a few calls per step instead of one `write` per tensor. A tensor whose
memory is an unwritten private mapping of a file (`torch.load(mmap=True)`,
safetensors, DCP's mapped reads; state/file_ranges.py) is copied file to
file by `copy_file_range`, so its bytes never pass through this process;
where the kernel refuses (another file system, an old kernel) its memory is
written instead. A CUDA tensor streams through bounded host blocks.
`O_DIRECT` is not used: on the machine measured it costs about three times
a buffered write at the call (docs/validation.md), and a recording is
read back soon after it is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, BinaryIO

from trainparity._internal.native.cuda import DeviceTensorBytes, iter_host_blocks
from trainparity._internal.state.file_ranges import FileRange

__all__ = ["write_values"]

_ZEROS = bytes(8)
# Linux writes at most this many bytes per write/writev call (MAX_RW_COUNT).
_MAX_CALL_BYTES = 0x7FFFF000
_IOV_MAX = 1024


def write_values(stream: BinaryIO, values: Sequence[tuple[Any, FileRange | None]]) -> None:
    """Append each (bytes, source) value to `stream`, each padded to a multiple of 8 bytes.

    `source`, when given and known unwritten, is the file range the bytes
    are mapped from: it is copied from the file. The stream is flushed first
    and positioned at its end after, so buffered writes may follow.
    """
    stream.flush()
    descriptor = stream.fileno()
    pending: list[memoryview] = []
    for data, source in values:
        padding = -len(data) % 8
        if isinstance(data, DeviceTensorBytes):
            _write_all(descriptor, pending)
            for block in iter_host_blocks(data):
                _write_all(descriptor, [block])
        else:
            view = memoryview(data).cast("B")
            copied = 0
            if source is not None and source.unwritten and len(view):
                _write_all(descriptor, pending)
                copied = _copy_from_file(source, descriptor, len(view))
            if copied < len(view):
                pending.append(view[copied:])
        if padding:
            pending.append(memoryview(_ZEROS)[:padding])
    _write_all(descriptor, pending)
    stream.seek(0, os.SEEK_END)


def _copy_from_file(source: FileRange, descriptor: int, count: int) -> int:
    """Bytes copied from `source` to `descriptor` by copy_file_range (0 where it does not apply)."""
    if not hasattr(os, "copy_file_range"):
        return 0
    try:
        origin = os.open(source.path, os.O_RDONLY)
    except OSError:
        return 0
    copied = 0
    try:
        while copied < count:
            step = os.copy_file_range(
                origin, descriptor, min(count - copied, _MAX_CALL_BYTES), source.offset + copied
            )
            if step <= 0:  # the file is shorter than it was when mapped: write the memory
                break
            copied += step
    except OSError:  # EXDEV, ENOSYS, EINVAL...: the memory is written instead
        pass
    finally:
        os.close(origin)
    return copied


def _write_all(descriptor: int, views: list[memoryview]) -> None:
    """writev every view, whole, in order (a short write resumes where it stopped); empties `views`."""
    first = 0
    while first < len(views):
        batch, total = [], 0
        for view in views[first : first + _IOV_MAX]:
            if total + len(view) > _MAX_CALL_BYTES and batch:
                break
            batch.append(view[: _MAX_CALL_BYTES - total])
            total += len(batch[-1])
        written = os.writev(descriptor, batch)
        if written <= 0:
            raise OSError(f"writev wrote {written} of {total} bytes")
        while first < len(views) and written >= len(views[first]):
            written -= len(views[first])
            first += 1
        if written:
            views[first] = views[first][written:]
    views.clear()
