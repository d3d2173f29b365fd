"""record_ids: every rank appends the sample IDs it consumes to its own int64 file, per epoch.

A directory of records holds one file per rank and epoch,
`rank{R}.epoch{E}.ids`: the IDs as raw little-endian int64, in consumption
order, nothing else. IDs are buffered in memory and appended with one
`write` per flush (when the buffer holds `FLUSH_IDS` IDs, when the epoch
changes, on `flush_ids()` and at interpreter exit), so a killed process
leaves every flushed ID readable; the only possible torn tail is part of one
8-byte value, which readers drop. Several processes (a split run and its
resume) may append to the same directory one after the other.

Beside each record, `rank{R}.epoch{E}.steps` places its IDs on the step axis
of `record()`: triples of little-endian int64 (step, start, end), one per
record() call after which this epoch held IDs not yet placed; the IDs at
positions [start, end) were consumed during that step (after the record()
call before it). IDs in no triple were consumed after a process's last
record() call. `record()` writes them through `mark_step`, so a script that
never calls record() gets no such file.

Beside each record, `rank{R}.epoch{E}.batches` holds where each batch ends:
one little-endian int64 per `record_ids` call (one call is one batch), the
record's ID count after it. Batch b of a rank is the IDs between the ends of
batches b-1 and b; the global order audit (SameGlobalOrder) interleaves the
ranks' batches by index.

Beside it, `rank{R}.epoch{E}.updates` holds, per batch, how many optimizer
steps (`torch.optim` optimizers, counted by torch's global step hook) this
process had completed when the batch was recorded. Batches recorded with no
optimizer step between them were drawn before any training on them: a
loader fast-forwarded by iterating past consumed batches (`islice`) draws
them so, and the resume audit tells such a replay from a retraining by it.

Nothing here needs NumPy: tensors are read through their memory, other
inputs through `array`.
"""

from __future__ import annotations

import array
import atexit
import bisect
import ctypes
import mmap
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "FLUSH_IDS",
    "append_batch",
    "IDS_DIR_VARIABLE",
    "ConsumptionSteps",
    "consumption_steps",
    "batch_ends",
    "batch_updates",
    "flush_ids",
    "ids_file_name",
    "mark_step",
    "read_recorded_ids",
    "record_ids",
    "record_key",
    "recorded_epochs",
    "recorded_ids",
]

IDS_DIR_VARIABLE = "TRAINPARITY_IDS_DIR"
"""Where record_ids writes when no directory is given (check_resume sets it per phase)."""

FLUSH_IDS = 1 << 16
"""IDs buffered per file before they are written (512 KiB)."""

PENDING_BATCHES = 64
"""Batches of IDs held as tensors before they are copied into the buffer (see append_tensor)."""

_FILE_PATTERN = re.compile(r"^rank(\d+)\.epoch(\d+)\.ids$")


_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
_MARK = struct.Struct("<qqq")  # step, first position, end position


def ids_file_name(rank: int, epoch: int) -> str:
    return f"rank{rank}.epoch{epoch}.ids"


def _steps_path(ids_path: Path) -> Path:
    return ids_path.with_suffix(".steps")


def _batches_path(ids_path: Path) -> Path:
    return ids_path.with_suffix(".batches")


def _updates_path(ids_path: Path) -> Path:
    return ids_path.with_suffix(".updates")


def _append(path: Path, data: bytes | bytearray | memoryview) -> None:
    descriptor = os.open(path, _APPEND, 0o644)
    try:
        _write_all(descriptor, data)
    finally:
        os.close(descriptor)


def _write_all(descriptor: int, data: bytes | bytearray | memoryview) -> None:
    with memoryview(data) as view:
        offset = 0
        while offset < len(view):
            offset += os.write(descriptor, view[offset:])


class _Writer:
    """The buffered appender of one (directory, rank, epoch) file, and of its step marks."""

    def __init__(self, path: Path, epoch: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.descriptor = os.open(path, _APPEND, 0o644)
        self.epoch = epoch
        self.buffer = bytearray()
        # Positions count from the file's start: an earlier process may have appended to it.
        self.count = os.fstat(self.descriptor).st_size // 8
        self.placed = self.count  # IDs before this position belong to a marked step
        self.marks = bytearray()
        self.ends = array.array("q")  # the ID count after each batch not yet written
        self.updates = array.array("q")  # the optimizer steps done when each batch came
        self.pending: list[Any] = []  # CPU tensors of IDs not yet copied into the buffer

    def append(self, data: Any) -> None:
        """Append one batch: `data` is a contiguous buffer of little-endian int64."""
        self.settle()  # batches reach the buffer in order
        with memoryview(data) as view:
            self.buffer += view  # not `+= data`: an ndarray would broadcast
            self.count += view.nbytes // 8
        self.ends.append(self.count)
        self.updates.append(_updates)
        if len(self.buffer) >= 8 * FLUSH_IDS:
            self.flush()

    def append_tensor(self, ids: Any) -> None:
        """Append one batch of IDs held by a CPU tensor that owns its storage, copied later.

        Copying a batch's IDs one by one costs more than the batch of a fast
        loader allows (a conversion per batch); joining `PENDING_BATCHES`
        of them at once costs a fraction. A tensor that owns its storage keeps
        nothing else alive meanwhile.
        """
        self.pending.append(ids)
        self.count += ids.numel()
        self.ends.append(self.count)
        self.updates.append(_updates)
        if len(self.pending) >= PENDING_BATCHES:
            self.settle()
            if len(self.buffer) >= 8 * FLUSH_IDS:
                self.flush()

    def settle(self) -> None:
        """Copy the pending tensors' IDs into the buffer (one join, one conversion)."""
        if not self.pending:
            return
        torch = sys.modules["torch"]
        joined = torch.cat([ids.reshape(-1) for ids in self.pending]).to(torch.int64)
        self.pending.clear()
        with memoryview(_as_int64_bytes(joined)) as view:
            self.buffer += view

    def mark(self, step: int) -> None:
        """The IDs consumed since the last mark were consumed during `step`."""
        if self.count > self.placed:
            self.marks += _MARK.pack(step, self.placed, self.count)
            self.placed = self.count

    def flush(self) -> None:
        self.settle()
        _write_all(self.descriptor, self.buffer)
        self.buffer.clear()
        if self.ends:  # after the IDs, so a batch end never points past the IDs on disk
            if sys.byteorder != "little":
                self.ends.byteswap()
            _append(_batches_path(self.path), memoryview(self.ends).cast("B"))
            del self.ends[:]
            if sys.byteorder != "little":
                self.updates.byteswap()
            _append(_updates_path(self.path), memoryview(self.updates).cast("B"))
            del self.updates[:]
        if self.marks:  # after the IDs they place, so a mark never precedes its IDs on disk
            _append(_steps_path(self.path), self.marks)
            self.marks.clear()

    def close(self) -> None:
        try:
            self.flush()
        finally:
            os.close(self.descriptor)


_writers: dict[tuple[str, int], _Writer] = {}
# Writers of a finished epoch whose last IDs await the next record() call's step.
_unplaced: list[_Writer] = []
_initialised_rank: int | None = None  # torch.distributed's rank, once it has one


def _default_rank() -> int:
    global _initialised_rank
    if _initialised_rank is not None:
        return _initialised_rank
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        _initialised_rank = int(distributed.get_rank())
        return _initialised_rank
    return int(os.environ.get("RANK", "0"))


_LITTLE = sys.byteorder == "little"

_updates = 0  # optimizer steps this process completed, once the hook below counts them
_counting: Any = None  # the handle of torch's global optimizer step hook, once registered


def _count_update(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
    global _updates
    _updates += 1


def _count_updates() -> None:
    """Count optimizer steps from now on (torch's global post-step hook), once torch.optim is loaded."""
    global _counting
    optimizer = sys.modules.get("torch.optim.optimizer")
    register = getattr(optimizer, "register_optimizer_step_post_hook", None)
    if register is not None:
        _counting = register(_count_update)


def _tensor_bytes(ids: Any) -> Any:
    """The bytes of a contiguous CPU tensor, read in place (no NumPy, which torch may lack).

    The returned buffer keeps `ids` alive; the caller copies it at once.
    """
    if not ids.numel():
        return b""
    view = (ctypes.c_char * (ids.numel() * ids.element_size())).from_address(ids.data_ptr())
    view.tensor = ids  # type: ignore[attr-defined]  # the memory's owner lives as long as the view
    return view


def _as_int64_bytes(ids: Any) -> Any:
    """Little-endian int64 bytes (a buffer) of a tensor, array, int or iterable of ints."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(ids, torch.Tensor):
        ids = ids.detach().to(device="cpu", dtype=torch.int64).contiguous().reshape(-1)
        if _LITTLE:
            return _tensor_bytes(ids)
        ids = ids.tolist()
    if isinstance(ids, int):
        ids = [ids]
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        return numpy.ascontiguousarray(numpy.asarray(ids).reshape(-1), dtype="<i8")
    values = array.array("q", [int(value) for value in ids])
    if not _LITTLE:
        values.byteswap()
    return memoryview(values).cast("B")


def record_ids(
    ids: Any,
    *,
    epoch: int,
    directory: str | os.PathLike[str] | None = None,
    rank: int | None = None,
) -> None:
    """Append the IDs this rank just consumed (a batch, in order) to its file for `epoch`.

    `ids`: a tensor, NumPy array or iterable of ints (int64). `directory`
    defaults to $TRAINPARITY_IDS_DIR; when neither is set nothing is recorded,
    so a script can call this unconditionally. `rank` defaults to
    torch.distributed's rank when a process group is initialised, else $RANK,
    else 0.
    """
    if directory is None:
        directory = os.environ.get(IDS_DIR_VARIABLE)
        if not directory:
            return
    append_batch(record_key(directory, rank), epoch, ids)


def record_key(directory: str | os.PathLike[str], rank: int | None) -> tuple[str, int]:
    """The (directory, rank) a record is kept under; `rank=None` resolved as record_ids does."""
    return (os.fspath(directory), _default_rank() if rank is None else rank)


def append_batch(key: tuple[str, int], epoch: int, ids: Any) -> None:
    """Append one batch of IDs to the record `key` (from record_key) for `epoch`."""
    if _counting is None:
        _count_updates()
    writer = _writers.get(key)
    if writer is None or writer.epoch != epoch or type(epoch) is not int:
        writer = _opened(key, epoch)
    torch = sys.modules.get("torch")
    if torch is not None and type(ids) is torch.Tensor and ids.is_cpu and ids._base is None:
        writer.append_tensor(ids)
    else:
        writer.append(_as_int64_bytes(ids))


def _opened(key: tuple[str, int], epoch: object) -> _Writer:
    """The writer for (directory, rank) switched to `epoch` (the previous epoch's file closed)."""
    directory, rank = key
    if type(epoch) is not int or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, not {epoch!r}")
    if type(rank) is not int or rank < 0:
        raise ValueError(f"rank must be a non-negative int, not {rank!r}")
    previous = _writers.pop(key, None)
    if previous is not None:
        previous.close()
        if previous.count > previous.placed:
            _unplaced.append(previous)
    writer = _Writer(Path(directory) / ids_file_name(rank, epoch), epoch)
    _writers[key] = writer
    return writer


def flush_ids() -> None:
    """Write every buffered ID now (done automatically at exit and when an epoch changes)."""
    for writer in _writers.values():
        writer.flush()


def mark_step(step: int) -> None:
    """Place the IDs recorded since the last call on the step axis: consumed during `step`.

    Called by `record()` (before it decides whether this step is stored), so
    IDs appended between record(step - 1, …) and record(step, …) belong to
    `step`. A finished epoch's last IDs are placed by the next call.
    """
    for writer in _writers.values():
        writer.mark(step)
    while _unplaced:
        writer = _unplaced.pop()
        writer.mark(step)
        _append(_steps_path(writer.path), writer.marks)
        writer.marks.clear()


@atexit.register
def _close_all() -> None:
    _unplaced.clear()  # consumed after the last record() call: during no recorded step
    while _writers:
        _key, writer = _writers.popitem()
        writer.close()


def recorded_epochs(directory: str | os.PathLike[str]) -> dict[int, dict[int, Path]]:
    """{epoch: {rank: file}} of the records in `directory`, epochs and ranks ascending."""
    found: dict[int, dict[int, Path]] = {}
    for entry in sorted(Path(directory).iterdir()):
        match = _FILE_PATTERN.match(entry.name)
        if match and entry.is_file():
            rank, epoch = int(match.group(1)), int(match.group(2))
            found.setdefault(epoch, {})[rank] = entry
    return {epoch: dict(sorted(found[epoch].items())) for epoch in sorted(found)}


def read_recorded_ids(path: str | os.PathLike[str]) -> memoryview:
    """The whole int64 values of one record file, memory-mapped; a torn last value is dropped."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        whole = size - size % 8
        if not whole:
            return memoryview(b"")
        mapped = mmap.mmap(handle.fileno(), whole, access=mmap.ACCESS_READ)
    return memoryview(mapped)


class ConsumptionSteps:
    """The step during which each position of one ID record was consumed (its `.steps` marks)."""

    def __init__(self, marks: list[tuple[int, int, int]]) -> None:
        self.marks = marks
        self.ends = [end for _step, _start, end in marks]

    def step_at(self, position: int) -> int | None:
        """The step of the ID at `position`; None when no record() call followed it."""
        index = bisect.bisect_right(self.ends, position)
        if index == len(self.marks):
            return None
        step, start, _end = self.marks[index]
        return step if start <= position else None


def consumption_steps(ids_path: str | os.PathLike[str]) -> ConsumptionSteps:
    """The step marks beside the record file `ids_path` (none when record() was not called)."""
    try:
        data = _steps_path(Path(ids_path)).read_bytes()
    except FileNotFoundError:
        data = b""
    whole = len(data) - len(data) % _MARK.size  # a torn last mark is dropped, as a torn ID is
    return ConsumptionSteps(list(_MARK.iter_unpack(data[:whole])))


def recorded_ids(directory: str | os.PathLike[str], epoch: int) -> dict[int, memoryview]:
    """{rank: int64 IDs} of one epoch's records, ready for `audit_rank_arrays` (memory-mapped)."""
    return {
        rank: read_recorded_ids(path)
        for rank, path in recorded_epochs(directory).get(epoch, {}).items()
    }


def batch_updates(ids_path: str | os.PathLike[str]) -> memoryview:
    """The optimizer steps done when each batch of the record `ids_path` came (int64, mmapped).

    Empty when the record has no `.updates` file (written before updates
    were recorded); a torn last value is dropped.
    """
    path = _updates_path(Path(ids_path))
    if not path.is_file():
        return memoryview(b"").cast("q")
    view = read_recorded_ids(path)
    return view.cast("q") if len(view) else memoryview(b"").cast("q")


def batch_ends(ids_path: str | os.PathLike[str]) -> memoryview:
    """The ID count after each recorded batch of the record `ids_path` (int64, memory-mapped).

    Empty when the record has no `.batches` file (written before batches were
    recorded); a torn last value is dropped.
    """
    path = _batches_path(Path(ids_path))
    if not path.is_file():
        return memoryview(b"").cast("q")
    view = read_recorded_ids(path)
    return view.cast("q") if len(view) else memoryview(b"").cast("q")
