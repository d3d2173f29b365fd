"""The corpus entries of the Accelerate programs: cases and scripts in frameworks/accelerate_cases.py."""

from benchmarks.corpus.programs.frameworks.accelerate_cases import ENTRIES

__all__ = ["ENTRIES"]
