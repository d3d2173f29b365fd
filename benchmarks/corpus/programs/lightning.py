"""The corpus entries of the Lightning programs: cases and scripts in frameworks/lightning_cases.py."""

from benchmarks.corpus.programs.frameworks.lightning_cases import ENTRIES

__all__ = ["ENTRIES"]
