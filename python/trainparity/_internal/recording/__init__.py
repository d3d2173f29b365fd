"""Recordings: per-step evidence of a training run (`record`), read back and compared step by step.

`record(step, state)` is the one line a training loop needs; it writes only
when a recording was asked for (`TRAINPARITY_RECORD=DIR`, a check's phases,
or `recording_to(DIR)`). See docs/trajectories.md.
"""

from trainparity._internal.recording.diff import RecordingDiff, diff_recordings
from trainparity._internal.recording.frames import RecordingError
from trainparity._internal.recording.reader import (
    RecordedStep,
    Recording,
    read_recording,
    read_recordings,
)
from trainparity._internal.recording.recorder import record, recording_active, recording_to
from trainparity._internal.state.summaries import TensorSummary

__all__ = [
    "RecordingDiff",
    "RecordedStep",
    "Recording",
    "RecordingError",
    "TensorSummary",
    "diff_recordings",
    "read_recording",
    "read_recordings",
    "record",
    "recording_active",
    "recording_to",
]
