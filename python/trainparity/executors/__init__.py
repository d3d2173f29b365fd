"""Executors: where a check's training phases run when not as local children (SLURM via submitit)."""

from trainparity.executors.slurm import SlurmExecutor

__all__ = ["SlurmExecutor"]
