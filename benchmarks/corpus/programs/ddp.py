"""The corpus entries of the DDP programs: cases and scripts in frameworks/ddp_cases.py."""

from benchmarks.corpus.programs.frameworks.ddp_cases import ENTRIES

__all__ = ["ENTRIES"]
