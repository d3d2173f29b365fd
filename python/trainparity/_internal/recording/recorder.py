"""`record(step, state)`: one line in a training loop, free unless a recording or trace was asked for.

A recording is asked for by the environment (`TRAINPARITY_RECORD=DIR`, set by
hand or by a check for its phases) or in-process with `recording_to(DIR)`; a
trace of one step by `TRAINPARITY_TRACE_STEP=N`, for which each record() call
marks a step boundary (see why/forensics/step_trace.py). Until then `record`
costs one comparison: this module imports nothing heavy at load time and
`record` touches nothing else when nothing is active.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.recording.crash_hook import (
    CRASH_AFTER_STEP_VARIABLE,
    STEP_LOG_VARIABLE,
    after_record,
)
from trainparity._internal.recording.variables import (
    ALSO_VARIABLE,
    EVERY_VARIABLE,
    FULL_BELOW_VARIABLE,
    MODE_VARIABLE,
    PHASE_VARIABLE,
    RECORD_VARIABLE,
)
from trainparity._internal.why.forensics.variables import TRACE_STEP_VARIABLE

MODES = ("auto", "full", "summary")
# "auto" keeps full values for a step whose tensors total at most this many bytes.
DEFAULT_FULL_BELOW_BYTES = 4 << 20
RECORDING_FORMAT = "trainparity-recording/1"

_UNRESOLVED = object()
# None: record() does nothing (the one check in it); _UNRESOLVED: look at the
# environment on the first call; else the active _Recorder, or _StepBoundaries
# around it (or around None) when a step is to be traced.
_active: Any = (
    _UNRESOLVED if RECORD_VARIABLE in os.environ or TRACE_STEP_VARIABLE in os.environ else None
)


def record(step: int, state: Mapping[str, object]) -> None:
    """Record the training state `state` as it is after `step` (an int).

    `state` is normalised and frozen exactly as an `observe_checkpoint` result
    (so its paths are the ones a check reports): a mapping of str to tensors,
    numbers, strings, lists, tuples, dicts, numpy values. Does nothing, at
    the cost of one comparison, unless this process records or traces a step.
    Call it after every optimizer step, and once right after loading a
    checkpoint (or building the model: as step 0). Sample IDs given to
    `record_ids` since the previous call are placed at this step.

    Under `TRAINPARITY_TRACE_STEP=N` each call is also a step boundary: the
    trace of step N holds the ops between record(N-1) and record(N), none of
    record()'s own (see docs/forensics.md).
    """
    active = _active
    if active is None:
        return
    if active is _UNRESOLVED:
        active = _from_environment()
        if active is None:
            return
    if isinstance(step, bool) or not isinstance(step, int):
        raise TypeError(f"record() step must be an int, got {type(step).__name__}")
    active.record(step, state)
    if STEP_LOG_VARIABLE in os.environ or CRASH_AFTER_STEP_VARIABLE in os.environ:
        after_record(step, current_rank())  # the crash check's runs (recording/crash_hook.py)


def recording_active() -> bool:
    """Whether `record` in this process writes anything."""
    active = _from_environment() if _active is _UNRESOLVED else _active
    if isinstance(active, _StepBoundaries):
        return active.recorder is not None
    return active is not None


@contextlib.contextmanager
def recording_to(
    directory: str | os.PathLike[str],
    *,
    mode: str = "auto",
    every: int = 1,
    full_below: int = DEFAULT_FULL_BELOW_BYTES,
    rank: int | None = None,
) -> Iterator[Path]:
    """Make `record` write to `directory` inside the block (in-process; nests, restores on exit).

    `mode`: "full" keeps every tensor's values, "summary" its digest and
    statistics (≤ 64 bytes per tensor and step), "auto" full for steps whose
    tensors total at most `full_below` bytes and summary above. `every`:
    record steps that are multiples of it (and always the first record).
    Yields the path of this rank's file.
    """
    global _active
    recorder = _Recorder(
        Path(directory), mode=mode, every=every, full_below=full_below, rank=rank, phase=None
    )
    previous = _active
    _active = _with_step_boundaries(recorder)
    try:
        yield recorder.path
    finally:
        _active = previous
        recorder.close()


def _from_environment() -> Any:
    """What record() does as the environment asks (created once): see `_active`."""
    global _active
    directory = os.environ.get(RECORD_VARIABLE)
    if not directory:
        _active = _with_step_boundaries(None)
        return _active
    also = os.environ.get(ALSO_VARIABLE, "")
    recorder = _Recorder(
        Path(directory),
        mode=os.environ.get(MODE_VARIABLE, "auto"),
        every=_int_variable(EVERY_VARIABLE, 1),
        full_below=_int_variable(FULL_BELOW_VARIABLE, DEFAULT_FULL_BELOW_BYTES),
        rank=None,
        phase=os.environ.get(PHASE_VARIABLE),
        also=frozenset(int(item) for item in also.split(",") if item.strip()),
    )
    _active = _with_step_boundaries(recorder)
    return _active


def _with_step_boundaries(recorder: _Recorder | None) -> Any:
    """`recorder`, wrapped in _StepBoundaries when the environment asks for a step trace."""
    return _StepBoundaries(recorder) if TRACE_STEP_VARIABLE in os.environ else recorder


class _StepBoundaries:
    """record() under TRAINPARITY_TRACE_STEP: each call marks a step boundary for the step tracer.

    The step ends before this call records and the next begins after it, so
    a traced step holds none of record()'s own ops (freezing, digesting).
    """

    def __init__(self, recorder: _Recorder | None) -> None:
        self.recorder = recorder

    def record(self, step: int, state: Mapping[str, object]) -> None:
        from trainparity._internal.why.forensics.step_trace import install_from_environment

        tracer = install_from_environment(follow_optimizers=False)
        if tracer is not None:
            tracer.record_arriving(step)
        if self.recorder is not None:
            self.recorder.record(step, state)
        if tracer is not None:
            tracer.record_done(step)


def _int_variable(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def current_rank() -> int:
    """torch.distributed's rank when initialised, else the RANK variable, else 0."""
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank())
    return int(os.environ.get("RANK", "0") or 0)


def rank_file_name(rank: int) -> str:
    return f"rank-{rank}.tprec"


class _Recorder:
    """Writes one rank's recording file: head frame, then layout and step frames."""

    def __init__(
        self,
        directory: Path,
        *,
        mode: str,
        every: int,
        full_below: int,
        rank: int | None,
        phase: str | None,
        also: frozenset[int] = frozenset(),
    ) -> None:
        from trainparity._internal.recording.frames import RecordingError

        if mode not in MODES:
            raise ValueError(f"recording mode must be one of {MODES}, got {mode!r}")
        for name, value, least in (("every", every, 1), ("full_below", full_below, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        self.directory = directory
        self.mode = mode
        self.every = every
        self.full_below = full_below
        self.phase = phase
        self.also = also
        self.rank = rank
        self.stream: Any = None
        self.records = 0
        self.layout_text: str | None = None
        self.layout_index = -1
        self.error_type = RecordingError

    @property
    def path(self) -> Path:
        return self.directory / rank_file_name(self.rank if self.rank is not None else 0)

    def _open(self) -> None:
        from trainparity._internal.environment import environment_fingerprint
        from trainparity._internal.recording.frames import HEAD

        if self.rank is None:
            self.rank = current_rank()
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self.stream = open(self.path, "xb")  # noqa: SIM115 - kept open across records
        except FileExistsError:
            raise self.error_type(
                f"{self.path} already exists: record each run (and each resumed run) into its "
                "own directory"
            ) from None
        head = {
            "format": RECORDING_FORMAT,
            "rank": self.rank,
            "phase": self.phase,
            "mode": self.mode,
            "every": self.every,
            "full_below": self.full_below,
            "environment": environment_fingerprint(),
        }
        self._frame(HEAD, json.dumps(head, sort_keys=True).encode(), [])

    def record(self, step: int, state: Mapping[str, object]) -> None:
        from trainparity._internal.recording.record_ids import mark_step

        # Every call, stored or not: the sample IDs taken since the last one belong to this step.
        mark_step(step)
        if self.records and step % self.every and step not in self.also:
            return
        from trainparity._internal.recording.frames import LAYOUT, STEP, STEP_META, TENSOR_RECORD
        from trainparity._internal.recording.layout import split_state
        from trainparity._internal.state.summaries import summarize_tensor

        # Full mode may copy a tensor mapped from a file file to file (value_writes.py).
        locate = None
        if self.mode == "full":
            from trainparity._internal.state.file_ranges import MappedFileLocator

            locate = MappedFileLocator.of_mapped_files().locate
        layout, scalars, tensors = split_state(state, locate=locate)
        if self.stream is None:
            self._open()
        if layout != self.layout_text:
            self._frame(LAYOUT, layout.encode(), [])
            self.layout_text = layout
            self.layout_index += 1
        total_bytes = sum(tensor.nbytes for tensor in tensors)
        full = self.mode == "full" or (self.mode == "auto" and total_bytes <= self.full_below)
        scalar_bytes = scalars.encode()
        records = bytearray()
        for tensor in tensors:
            summary = summarize_tensor(tensor.dtype, tensor.data, with_statistics=not full)
            records += TENSOR_RECORD.pack(
                summary.digest,
                summary.count,
                summary.sum,
                summary.l2_norm,
                summary.max_abs,
                summary.nan_count,
                summary.inf_count,
            )
        meta = (
            STEP_META.pack(step, self.layout_index, int(full), len(scalar_bytes))
            + scalar_bytes
            + b"\0" * (-len(scalar_bytes) % 8)
            + bytes(records)
        )
        self._frame(
            STEP, meta, [(tensor.data, tensor.source) for tensor in tensors] if full else []
        )
        self.records += 1

    def _frame(self, kind: bytes, meta: bytes, values: list[tuple[Any, Any]]) -> None:
        """Append one frame; the stream is flushed, so a completed step survives a killed process.

        `values`: (tensor bytes, the file range they are mapped from or None).
        """
        from trainparity._internal.recording.frames import frame_header, frame_trailer
        from trainparity._internal.recording.value_writes import write_values

        data_length = sum(padded_length(len(value)) for value, _ in values)
        header = frame_header(kind, len(meta), data_length)
        padded_meta = meta + b"\0" * (-len(meta) % 8)
        self.stream.write(header + padded_meta)
        if values:
            write_values(self.stream, values)
        from trainparity._internal.native.core import core

        self.stream.write(frame_trailer(header, padded_meta, core.DIGEST_VERSION))
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None:
            os.fsync(self.stream.fileno())
            self.stream.close()
            self.stream = None


def padded_length(length: int) -> int:
    return length + (-length % 8)
