"""Multi-rank jobs: torchrun command lines, rank-aware phase evidence, and what a rank's script calls (end_rank; track_ids and flush_ids live in recording/)."""

from trainparity.distributed.ending import end_rank
from trainparity.distributed.launch import torchrun_command
from trainparity.recording.record_ids import flush_ids
from trainparity.recording.track_ids import track_ids

__all__ = ["end_rank", "flush_ids", "torchrun_command", "track_ids"]
