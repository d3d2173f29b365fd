"""Opens per-rank int64 arrays (buffers, .npy files, raw little-endian files) as core segments."""

from __future__ import annotations

import array
import ast
import mmap
import os
import struct
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.coverage.ids import (
    ExpectedIds,
    ObjectIds,
    Observed,
    count_message,
    is_count,
)
from trainparity._internal.error_text import error_text
from trainparity._internal.native.core import core
from trainparity._internal.state.input_files import special_file_kind

# A buffer of int64 (numpy array, array.array("q"), memoryview, bytes) or a file path.
RankArray = Any

_NPY_MAGIC = b"\x93NUMPY"
_NPY_KEYS = {"descr", "fortran_order", "shape"}
_RAW_BYTES = (bytes, bytearray, mmap.mmap)
_INT64_FORMATS = {"q", "l", "@q", "@l", "=q", "=l", "<q" if sys.byteorder == "little" else ">q"}


class ArrayProblem(Exception):
    """A per-rank array that cannot be audited; the message says what to do."""


def _open_file(path: Path, label: str) -> memoryview:
    """The int64 values of a .npy file (1-D, '<i8') or of a raw little-endian int64 file.

    The file is mapped, not read: the views keep the mapping alive, and it is
    unmapped when the last of them is dropped.
    """
    kind = special_file_kind(path)
    if kind is not None:
        raise ArrayProblem(
            f"{label}: {str(path)!r} is {kind}, not a regular file; the IDs are memory-mapped: "
            "write them to a file"
        )
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        data = (
            memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
            if size
            else memoryview(b"")
        )
    where = f"{label}: {str(path)!r}"
    offset = _npy_data_offset(data, where) if path.suffix == ".npy" else 0
    body = data[offset:]
    if len(body) % 8:
        raise ArrayProblem(f"{where} has {len(body)} bytes, not a whole number of int64 values")
    if sys.byteorder != "little":  # files are little-endian; the core reads native order
        swapped = array.array("q", body.tobytes())
        swapped.byteswap()
        return memoryview(swapped.tobytes())
    return body


def _npy_data_offset(data: memoryview, where: str) -> int:
    """Where the values of a one-dimensional little-endian int64 .npy file start."""
    if bytes(data[:6]) != _NPY_MAGIC[: len(data)] or not len(data):
        raise ArrayProblem(f"{where} is not a .npy file (no NUMPY magic)")
    major = data[6] if len(data) > 6 else None
    minor = data[7] if len(data) > 7 else 0
    if major is not None and (major not in (1, 2, 3) or minor != 0):
        raise ArrayProblem(f"{where} has an unsupported .npy format version {major}.{minor}")
    start = 10 if major == 1 else 12
    if len(data) < start:
        raise ArrayProblem(f"{where} is truncated: its .npy header is incomplete")
    (header_length,) = struct.unpack("<H" if major == 1 else "<I", data[8:start])
    if len(data) < start + header_length:
        raise ArrayProblem(f"{where} is truncated: its .npy header is incomplete")
    try:
        header = ast.literal_eval(bytes(data[start : start + header_length]).decode("latin1"))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as error:
        # The error's own text can hold object addresses (`<ast.Name object at 0x...>`),
        # which would make two reports of the same file differ.
        raise ArrayProblem(
            f"{where} has an unreadable .npy header ({type(error).__name__})"
        ) from None
    if isinstance(header, dict) and (
        set(header) != _NPY_KEYS or type(header["fortran_order"]) is not bool
    ):
        # What NumPy refuses too: other keys are not a file numpy.save wrote.
        raise ArrayProblem(
            f"{where} has an unreadable .npy header (keys {sorted(map(repr, header))}, "
            f"fortran_order {header.get('fortran_order')!r})"
        )
    if not isinstance(header, dict) or header.get("descr") not in ("<i8", "<q"):
        descr = header.get("descr") if isinstance(header, dict) else None
        raise ArrayProblem(
            f"{where} must hold little-endian int64 ('<i8'), not {descr!r}; "
            "save it with numpy.save(path, numpy.asarray(ids, dtype='<i8'))"
        )
    shape = header.get("shape")
    if not (isinstance(shape, tuple) and len(shape) == 1):
        raise ArrayProblem(f"{where} must be one-dimensional, not of shape {shape!r}")
    (length,) = shape
    if type(length) is not int or length < 0:
        raise ArrayProblem(f"{where} has an unreadable .npy header (shape {shape!r})")
    offset = start + header_length
    if len(data) - offset != 8 * length:
        raise ArrayProblem(f"{where} is truncated: its header promises {length} values")
    return offset


def _open_buffer(source: Any, label: str) -> memoryview:
    try:
        view = memoryview(source)
    except TypeError:
        raise ArrayProblem(
            f"{label} must be a buffer of int64 (numpy array, array.array('q'), bytes) or a "
            f"file path, not {type(source).__name__}"
        ) from None
    if view.ndim > 1:
        raise ArrayProblem(f"{label} must be one-dimensional, not of shape {view.shape}")
    if not view.c_contiguous:
        raise ArrayProblem(f"{label} must be contiguous; pass numpy.ascontiguousarray(ids)")
    if isinstance(source, _RAW_BYTES) or (isinstance(source, memoryview) and view.format == "B"):
        if view.nbytes % 8:
            raise ArrayProblem(
                f"{label}: {view.nbytes} bytes are not a whole number of int64 values"
            )
        return view.cast("B")  # raw native int64, e.g. read from a file
    if view.format not in _INT64_FORMATS or view.itemsize != 8:
        raise ArrayProblem(
            f"{label} must hold int64 values, not buffer format {view.format!r}; "
            "convert with numpy.asarray(ids, dtype=numpy.int64)"
        )
    return view.cast("B")


def open_rank_array(source: RankArray, label: str) -> memoryview:
    """A byte view of one rank's int64 values."""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            return _open_file(path, label)
        except OSError as error:
            raise ArrayProblem(f"{label} could not be read: {error_text(error)}") from None
    return _open_buffer(source, label)


def _per_rank(
    name: str, mapping: Mapping[int, RankArray], ranks: list[int]
) -> dict[int, RankArray] | str:
    """A mapping of per-rank arrays for exactly `ranks`, or the message of the problem."""
    try:
        items = dict(mapping.items())
    except Exception as error:
        return f"{name} could not be read: {error_text(error)}"
    if set(items) != set(ranks):
        missing = sorted(set(ranks) - set(items), key=repr)
        extra = sorted(set(items) - set(ranks), key=repr)
        return (
            f"{name} must give an array for exactly the ranks of rank_ids "
            f"(missing ranks: {missing}, unknown ranks: {extra})"
        )
    return items


def read_rank_arrays(
    arrays: list[tuple[int, RankArray]],
    epoch: object,
    workers: Mapping[int, RankArray] | None,
    expected: ExpectedIds | None,
) -> Observed | str:
    """Observed from per-rank arrays (ranks ascending), or the message of the first problem."""
    if isinstance(expected, ObjectIds):
        return (
            "rank ID arrays hold int64 IDs, so the expected ID universe must hold int IDs "
            "inside int64"
        )
    ranks = [rank for rank, _source in arrays]
    epochs: dict[int, RankArray] | None = None
    if isinstance(epoch, Mapping):
        per_rank = _per_rank("epoch", epoch, ranks)
        if isinstance(per_rank, str):
            return per_rank
        epochs = per_rank
    elif not is_count(epoch):
        return count_message("epoch", epoch)
    worker_arrays: dict[int, RankArray] | None = None
    if workers is not None:
        per_rank = _per_rank("workers", workers, ranks)
        if isinstance(per_rank, str):
            return per_rank
        worker_arrays = per_rank
    segments = []
    total = 0
    try:
        for code, (rank, source) in enumerate(arrays):
            keys = open_rank_array(source, f"rank {rank} IDs")
            count = len(keys) // 8
            epoch_column: Any = epoch
            if epochs is not None:
                epoch_column = _checked_column(
                    epochs[rank], rank, "epochs", count, 0, "epoch must be a non-negative integer"
                )
            worker_column = None
            if worker_arrays is not None:
                worker_column = _checked_column(
                    worker_arrays[rank],
                    rank,
                    "workers",
                    count,
                    -1,
                    "worker must be -1 (unknown) or a non-negative integer",
                )
            segments.append((keys, code, epoch_column, None, worker_column))
            total += count
    except ArrayProblem as problem:
        return str(problem)
    if total > core.COVERAGE_MAX_OBSERVATIONS:
        limit = core.COVERAGE_MAX_OBSERVATIONS
        return f"too many observations: the coverage core audits at most {limit}"
    return Observed(segments, ranks, None, total)


def _checked_column(
    source: RankArray,
    rank: int,
    what: str,
    count: int,
    minimum: int,
    message: str,
) -> memoryview:
    """One per-ID column of a rank, as long as its IDs and with no value below `minimum`."""
    label = f"rank {rank} {what}"
    column = open_rank_array(source, label)
    if len(column) // 8 != count:
        raise ArrayProblem(
            f"rank {rank} has {len(column) // 8} {what.rstrip('s')} values for {count} IDs; "
            "give one value per ID"
        )
    below = core.coverage_first_below(column, minimum)
    if below >= 0:
        raise ArrayProblem(f"{message} (rank {rank}, position {below})")
    return column
