"""Reading recordings back: memory-mapped, every frame and every stored tensor verified."""

from __future__ import annotations

import json
import math
import mmap
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainparity._internal.native.cuda import digest_buffer
from trainparity._internal.recording.frames import (
    HEAD,
    LAYOUT,
    STEP,
    STEP_META,
    TENSOR_RECORD,
    PartialTail,
    RecordingError,
    damaged,
    padded,
    scan_frames,
)
from trainparity._internal.recording.layout import join_state
from trainparity._internal.recording.recorder import RECORDING_FORMAT
from trainparity._internal.state.freeze import FrozenMapping, FrozenTensor
from trainparity._internal.state.snapshot import Snapshot
from trainparity._internal.state.summaries import TensorSummary, summarize_tensor
from trainparity._internal.state.tree_codec import placement_of_entry

__all__ = ["RecordedStep", "Recording", "read_recording", "read_recordings", "recording_files"]

_RANK_FILE = re.compile(r"rank-(0|[1-9][0-9]*)\.tprec")


@dataclass(frozen=True)
class RecordedStep:
    """One `record()` call: the step it claimed, its frozen state and per-tensor summaries.

    `full` tells whether tensor values are stored (leaves are read-only views
    into the mapped file) or only summaries (leaves carry the digest, no data).
    """

    index: int
    step: int
    full: bool
    state: FrozenMapping = field(repr=False)
    summaries: dict[str, TensorSummary] = field(repr=False)

    def snapshot(self) -> Snapshot:
        """The step as a Snapshot whose `step` is the claimed one (compared like any field)."""
        return Snapshot(step=self.step, state=self.state)

    def summary(self, name: str) -> TensorSummary:
        """The summary of tensor `name`, statistics computed from the values for a full step."""
        summary = self.summaries[name]
        if self.full and math.isnan(summary.sum):
            tensor = tensor_at(self.state, name)
            if tensor is not None and tensor.data is not None:
                return summarize_tensor(tensor.dtype, tensor.data)
        return summary


@dataclass(frozen=True)
class Recording:
    """One rank's recording: its head (phase, mode, environment) and its complete steps.

    `partial_tail`: the file ends in a frame cut short by a killed writer,
    which was left out; `partial_tail_step` is the step that frame claims
    (None when the file ends before that field, or the frame is not a step).
    `frame_version`: 1 when every frame header carries a checksum, 0 for a
    recording written before they did (None: the file holds no whole header).
    """

    path: Path
    rank: int
    phase: str | None
    mode: str
    environment: dict[str, Any] | None
    steps: tuple[RecordedStep, ...]
    partial_tail: bool
    file_bytes: int
    partial_tail_step: int | None = None
    frame_version: int | None = None


def recording_files(directory: str | os.PathLike[str]) -> dict[int, Path]:
    """The rank files of a recording directory, by rank."""
    root = Path(directory)
    if not root.is_dir():
        return {}
    files = {}
    for entry in root.iterdir():
        match = _RANK_FILE.fullmatch(entry.name)
        if match and entry.is_file():
            files[int(match.group(1))] = entry
    return dict(sorted(files.items()))


def read_recordings(
    directory: str | os.PathLike[str], *, trust_digests: bool = False
) -> dict[int, Recording]:
    """Every rank of a recording directory (empty when nothing was recorded there)."""
    return {
        rank: read_recording(path, trust_digests=trust_digests)
        for rank, path in recording_files(directory).items()
    }


def read_recording(
    path: str | os.PathLike[str], *, rank: int | None = None, trust_digests: bool = False
) -> Recording:
    """Map one rank's recording (a rank file, or a directory and `rank`, default its only/first rank).

    Every frame header is checked against its checksum, every frame against
    its trailer digest and every stored tensor against its recorded digest,
    as `read_snapshot` checks snapshot files (`trust_digests=True` skips the
    tensor check). A last frame cut short by a killed process, with a header
    that verifies, is left out (`partial_tail`); anything else wrong raises
    RecordingError (a SnapshotFileError) naming the frame's byte offset.
    """
    source = Path(path)
    if source.is_dir():
        files = recording_files(source)
        if not files:
            raise RecordingError(f"{source} holds no recording (no rank-N.tprec file)")
        if rank is None:
            rank = next(iter(files))
        if rank not in files:
            raise RecordingError(f"{source} has no recording of rank {rank} (ranks {list(files)})")
        source = files[rank]
    if not source.is_file():
        raise RecordingError(f"recording {source} does not exist or is not a file")
    with open(source, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        if size == 0:
            return _empty(source)
        mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
    scan = scan_frames(source, mapped)
    frames = scan.frames
    if not frames:
        return _empty(source, scan.partial_tail, scan.frame_version)
    if frames[0].kind != HEAD:
        raise damaged(source, "it does not start with a head frame")
    try:
        head = json.loads(bytes(frames[0].meta))
        if head.get("format") != RECORDING_FORMAT:
            raise RecordingError(
                f"recording {source} has format {head.get('format')!r}, expected {RECORDING_FORMAT!r}"
            )
        steps = _steps(source, frames[1:], trust_digests)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        if isinstance(error, RecordingError):
            raise
        raise RecordingError(f"recording {source} is unreadable: {error}") from None
    return Recording(
        path=source,
        rank=int(head["rank"]),
        phase=head.get("phase"),
        mode=str(head["mode"]),
        environment=head.get("environment"),
        steps=tuple(steps),
        partial_tail=scan.partial_tail is not None,
        file_bytes=size,
        partial_tail_step=None if scan.partial_tail is None else scan.partial_tail.step,
        frame_version=scan.frame_version,
    )


def _empty(
    source: Path, partial_tail: PartialTail | None = None, frame_version: int | None = None
) -> Recording:
    """A process killed before its first frame was complete: nothing was recorded."""
    return Recording(
        source,
        0,
        None,
        "auto",
        None,
        (),
        partial_tail is not None,
        source.stat().st_size,
        None if partial_tail is None else partial_tail.step,
        frame_version,
    )


def _steps(source: Path, frames: list, trust_digests: bool) -> list[RecordedStep]:
    layouts: list[dict] = []
    steps: list[RecordedStep] = []
    for frame in frames:
        if frame.kind == LAYOUT:
            layouts.append(json.loads(bytes(frame.meta)))
            continue
        if frame.kind != STEP:
            raise damaged(source, f"a second head frame at byte {frame.offset}")
        step, layout_index, full, scalar_length = STEP_META.unpack_from(frame.meta, 0)
        layout = layouts[layout_index]
        scalars_end = STEP_META.size + scalar_length
        scalars = json.loads(bytes(frame.meta[STEP_META.size : scalars_end]))
        records_start = padded(scalars_end)
        table = layout["tensors"]
        if len(frame.meta) - records_start != TENSOR_RECORD.size * len(table):
            raise damaged(source, f"step at byte {frame.offset} has the wrong number of tensors")
        tensors: list[FrozenTensor] = []
        summaries: dict[str, TensorSummary] = {}
        data_offset = 0
        for number, entry in enumerate(table):
            summary = TensorSummary(
                *TENSOR_RECORD.unpack_from(frame.meta, records_start + number * TENSOR_RECORD.size)
            )
            shape = tuple(int(size) for size in entry["shape"])
            tensor = FrozenTensor(
                shape=shape,
                dtype=entry["dtype"],
                device=str(entry["device"]),
                requires_grad=bool(entry["requires_grad"]),
                data=None,
                digest=summary.digest,
                placement=placement_of_entry(entry),
            )
            if full:
                nbytes = tensor.nbytes
                if data_offset + nbytes > len(frame.data):
                    raise damaged(
                        source, f"step at byte {frame.offset} is shorter than its tensors"
                    )
                data = frame.data[data_offset : data_offset + nbytes]
                # No digest covers the padding: zero is checked, so no byte goes unverified.
                if any(frame.data[data_offset + nbytes : data_offset + padded(nbytes)]):
                    raise damaged(
                        source,
                        f"the padding after tensor {entry['name']} of step {step} is not zero",
                    )
                data_offset += padded(nbytes)
                if not trust_digests:
                    recorded = digest_buffer(data, version=frame.digest_version)[0]
                    if recorded != summary.digest:
                        raise damaged(
                            source,
                            f"tensor {entry['name']} of step {step} does not match its recorded digest",
                        )
                tensor = replace(tensor, data=data)
            tensors.append(tensor)
            summaries[entry["name"]] = summary
        if data_offset != len(frame.data):
            raise damaged(source, f"step at byte {frame.offset} holds bytes beyond its tensors")
        state = join_state(layout, scalars, tensors)
        steps.append(RecordedStep(len(steps), step, bool(full), state, summaries))
    return steps


def tensor_at(state: FrozenMapping, name: str) -> FrozenTensor | None:
    """The tensor leaf whose rendered path is `name` (a linear search; summaries are rare)."""
    from trainparity._internal.state.paths import render_path

    stack: list[tuple[Any, tuple]] = [(state, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, FrozenTensor):
            if render_path(path) == name:
                return node
        elif isinstance(node, FrozenMapping):
            stack.extend((item, (*path, key)) for key, item in node.entries)
        elif hasattr(node, "items"):
            stack.extend((item, (*path, index)) for index, item in enumerate(node.items))
    return None
