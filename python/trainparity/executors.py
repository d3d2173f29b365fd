"""`trainparity.executors`: where a check's phases run when not as local children (SLURM via submitit)."""

from trainparity._internal.executors.slurm import SlurmExecutor

__all__ = ["SlurmExecutor"]
