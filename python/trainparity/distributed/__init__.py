"""Multi-rank jobs: torchrun command lines, rank-aware phase evidence, per-rank sample ID records (record_ids, track_ids)."""

from trainparity.distributed.ending import end_rank
from trainparity.distributed.launch import torchrun_command
from trainparity.distributed.record_ids import flush_ids
from trainparity.distributed.track_ids import track_ids

__all__ = ["end_rank", "flush_ids", "torchrun_command", "track_ids"]
