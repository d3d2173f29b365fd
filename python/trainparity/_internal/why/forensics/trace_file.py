"""Trace files: a trace stored as a snapshot file (same layout, same verification), in columns.

The snapshot's state is `{"trace": {...}}` with:

- `format` "trainparity-trace/1", `capture`, `strings` (every op name, module
  path, phase, dtype, device, shape and value name, once);
- `ops` int64 [ops, 4]: name, module, phase (string indices), call index;
  `op_inputs` / `op_outputs` int64: the value indices of all ops back to back,
  `op_input_offsets` / `op_output_offsets` int64 [ops + 1] where each op's start;
- `values` int64 [values, 10]: kind, producer, source, dtype, device, shape,
  name (string indices), element count, NaN count, Inf count;
  `value_digests` uint8 [values, 16] (all zero where `value_has_digest` is 0);
  `value_has_digest` bool [values]; `value_stats` float64 [values, 3]: sum,
  L2 norm, max |x|;
- `kept`: value index (decimal) -> the whole tensor, for the kept modules.

Columns instead of one mapping per op keep a 10k-op trace a few hundred
kilobytes, written and read in milliseconds; the snapshot's digests cover
every column, so a trace read back is verified like any snapshot.
"""

from __future__ import annotations

import gc
import json
import os
import struct
from pathlib import Path
from typing import Any

import torch

from trainparity._internal.state.freeze import FrozenMapping, FrozenSequence, FrozenTensor
from trainparity._internal.state.snapshot_file import read_snapshot, write_snapshot
from trainparity._internal.state.tree_codec import SnapshotFileError
from trainparity._internal.why.forensics.records import VALUE_KINDS, Trace, TraceOp, TraceValue

__all__ = ["TRACE_FORMAT", "is_trace_file", "read_trace", "write_trace"]

TRACE_FORMAT = "trainparity-trace/1"
_VALUE_COLUMNS = 10


def write_trace(path: str | os.PathLike[str], trace: Trace) -> Path:
    """Write `trace` to `path` (atomically, with its environment fingerprint); returns the path."""
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings))

    ops = [[sid(op.name), sid(op.module), sid(op.phase), op.call_index] for op in trace.ops]
    op_inputs = [index for op in trace.ops for index in op.inputs]
    op_outputs = [index for op in trace.ops for index in op.outputs]
    values = [
        [
            VALUE_KINDS.index(value.kind),
            value.producer,
            value.source,
            sid(value.dtype),
            sid(value.device),
            sid(",".join(map(str, value.shape))),
            sid(value.name),
            value.count,
            value.nan_count,
            value.inf_count,
        ]
        for value in trace.values
    ]
    digests = b"".join(value.digest or bytes(16) for value in trace.values)
    state = {
        "trace": {
            "format": TRACE_FORMAT,
            "capture": trace.capture,
            "strings": list(strings),
            "ops": _int_table(ops, 4),
            "op_inputs": torch.tensor(op_inputs, dtype=torch.int64),
            "op_outputs": torch.tensor(op_outputs, dtype=torch.int64),
            "op_input_offsets": _offsets(len(op.inputs) for op in trace.ops),
            "op_output_offsets": _offsets(len(op.outputs) for op in trace.ops),
            "values": _int_table(values, _VALUE_COLUMNS),
            "value_digests": torch.frombuffer(bytearray(digests), dtype=torch.uint8).reshape(
                len(trace.values), 16
            )
            if digests
            else torch.zeros((0, 16), dtype=torch.uint8),
            "value_has_digest": torch.tensor(
                [value.digest is not None for value in trace.values], dtype=torch.bool
            ),
            "value_stats": torch.tensor(
                [[value.sum, value.l2_norm, value.max_abs] for value in trace.values],
                dtype=torch.float64,
            ).reshape(len(trace.values), 3),
            "kept": {str(index): tensor for index, tensor in sorted(trace.kept.items())},
        }
    }
    target = Path(path)
    write_snapshot(target, state, step=trace.step, environment=trace.environment)
    return target


def _int_table(rows: list[list[int]], width: int) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.int64).reshape(len(rows), width)


def _offsets(lengths: Any) -> torch.Tensor:
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + length)
    return torch.tensor(offsets, dtype=torch.int64)


def is_trace_file(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a trace (not a state snapshot), from its header alone; False if unreadable.

    Only the header is read, unverified: it tells which diff to run, and that
    diff then verifies the whole file before anything relies on it. Only a
    regular file is opened: opening a FIFO would block until a writer came.
    """
    try:
        if not Path(path).is_file():
            return False
        with open(path, "rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(8))
            if length > 512 << 20:
                return False
            header = json.loads(stream.read(length))
        manifest = json.loads(header["__metadata__"]["trainparity"])
        tree = manifest["tree"]
        return tree[0] == "m" and [key for key, _ in tree[1]] == ["trace"]
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error):
        return False


def read_trace(path: str | os.PathLike[str], *, trust_digests: bool = False) -> Trace:
    """Read and verify a trace file (every column against its digest, as read_snapshot does).

    Raises SnapshotFileError for a damaged, truncated or foreign file, or a
    snapshot that is not a trace. Kept tensors are read-only views into the
    memory-mapped file (FrozenTensor leaves).
    """
    snapshot, extras = read_snapshot(path, trust_digests=trust_digests)
    # Building ~10 objects per op triggers the cyclic collector again and again, scanning
    # everything built so far; none of them form cycles, so it is paused meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        root = dict(snapshot.state.entries)
        fields = dict(_mapping(root["trace"]).entries)
        if fields.get("format") != TRACE_FORMAT:
            raise SnapshotFileError(f"format is {fields.get('format')!r}, not {TRACE_FORMAT!r}")
        strings = list(_sequence(fields["strings"]).items)
        ops_table = _rows(fields["ops"], "q", 4)
        op_inputs = _column(fields["op_inputs"], "q")
        op_outputs = _column(fields["op_outputs"], "q")
        input_offsets = _column(fields["op_input_offsets"], "q")
        output_offsets = _column(fields["op_output_offsets"], "q")
        value_rows = _rows(fields["values"], "q", _VALUE_COLUMNS)
        digests = _bytes(fields["value_digests"])
        has_digest = _column(fields["value_has_digest"], "?")
        stats = _rows(fields["value_stats"], "d", 3)
        ops = [
            TraceOp(
                index=index,
                name=strings[name],
                module=strings[module],
                phase=strings[phase],
                call_index=call_index,
                inputs=tuple(op_inputs[input_offsets[index] : input_offsets[index + 1]]),
                outputs=tuple(op_outputs[output_offsets[index] : output_offsets[index + 1]]),
            )
            for index, (name, module, phase, call_index) in enumerate(ops_table)
        ]
        values = [
            TraceValue(
                index=index,
                kind=VALUE_KINDS[row[0]],
                producer=row[1],
                source=row[2],
                dtype=strings[row[3]],
                device=strings[row[4]],
                shape=tuple(int(size) for size in strings[row[5]].split(",") if size),
                name=strings[row[6]],
                count=row[7],
                nan_count=row[8],
                inf_count=row[9],
                digest=digests[16 * index : 16 * index + 16] if has_digest[index] else None,
                sum=stats[index][0],
                l2_norm=stats[index][1],
                max_abs=stats[index][2],
            )
            for index, row in enumerate(value_rows)
        ]
        kept = {int(key): tensor for key, tensor in _mapping(fields["kept"]).entries}
        _check_references(ops, values, kept)
    except SnapshotFileError as error:
        raise SnapshotFileError(f"{path} is not a readable trace: {error}") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as error:
        raise SnapshotFileError(
            f"{path} is a snapshot but not a trace ({type(error).__name__}: {error}); "
            "diff it with another snapshot, or trace the step with trainparity.trace"
        ) from None
    finally:
        if collecting:
            gc.enable()
    return Trace(
        ops=ops,
        values=values,
        kept=kept,
        environment=extras["environment"],
        step=snapshot.step,
        capture=str(fields.get("capture", "")),
        path=os.fspath(path),
    )


def _mapping(node: Any) -> FrozenMapping:
    if not isinstance(node, FrozenMapping):
        raise TypeError("expected a mapping")
    return node


def _sequence(node: Any) -> FrozenSequence:
    if not isinstance(node, FrozenSequence):
        raise TypeError("expected a list")
    return node


def _bytes(node: Any) -> bytes:
    if not isinstance(node, FrozenTensor) or node.data is None:
        raise TypeError("expected a tensor with values")
    return bytes(node.data)


def _column(node: Any, code: str) -> list:
    data = _bytes(node)
    return list(memoryview(data).cast(code)) if data else []


def _rows(node: Any, code: str, width: int) -> list[tuple]:
    flat = _column(node, code)
    if len(node.shape) != 2 or node.shape[1] != width:
        raise ValueError(f"expected a table of {width} columns, got shape {node.shape}")
    return list(zip(*(flat[column::width] for column in range(width)), strict=True))


def _check_references(ops: list[TraceOp], values: list[TraceValue], kept: dict) -> None:
    count = len(values)
    for op in ops:
        for index in (*op.inputs, *op.outputs):
            if not 0 <= index < count:
                raise ValueError(f"op {op.index} refers to value {index} of {count}")
    for value in values:
        if not -1 <= value.producer < len(ops) or not -1 <= value.source < count:
            raise ValueError(f"value {value.index} refers outside the trace")
    for index in kept:
        if not 0 <= index < count:
            raise ValueError(f"kept tensor {index} refers outside the trace")
