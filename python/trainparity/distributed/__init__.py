"""Multi-rank jobs: torchrun command lines, rank-aware phase evidence, per-rank sample ID records."""

from trainparity.distributed.launch import torchrun_command

__all__ = ["torchrun_command"]
