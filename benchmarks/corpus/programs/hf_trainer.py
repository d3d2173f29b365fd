"""The corpus entries of the Hugging Face Trainer programs: cases and scripts in frameworks/hf_trainer_cases.py."""

from benchmarks.corpus.programs.frameworks.hf_trainer_cases import ENTRIES

__all__ = ["ENTRIES"]
