"""Executors: where a check's training phases run when not as local children (SLURM via submitit)."""
