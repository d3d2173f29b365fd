"""`trainparity.distributed`: what a rank's script calls (end_rank, track_ids, flush_ids), torchrun
command lines, and the readers of record_ids directories."""

from trainparity._internal.distributed.ending import end_rank
from trainparity._internal.distributed.torchrun_argv import torchrun_command
from trainparity._internal.recording.record_ids import (
    IDS_DIR_VARIABLE,
    batch_ends,
    consumption_steps,
    flush_ids,
    read_recorded_ids,
    recorded_epochs,
    recorded_ids,
)
from trainparity._internal.recording.track_ids import track_ids

__all__ = [
    "IDS_DIR_VARIABLE",
    "batch_ends",
    "consumption_steps",
    "end_rank",
    "flush_ids",
    "read_recorded_ids",
    "recorded_epochs",
    "recorded_ids",
    "torchrun_command",
    "track_ids",
]
