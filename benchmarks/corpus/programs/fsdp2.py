"""The corpus entries of the FSDP2 programs: cases and scripts in frameworks/fsdp2_cases.py."""

from benchmarks.corpus.programs.frameworks.fsdp2_cases import ENTRIES

__all__ = ["ENTRIES"]
