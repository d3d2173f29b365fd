"""The verdict-quality corpus: clean training programs and planted faults (issue 50).

Each module in `benchmarks/corpus/programs/` defines `ENTRIES: list[Entry]`; the
runner `benchmarks/verdicts.py` runs them and prints a precision/recall table.
"""

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAULT_CLASSES = (
    "scheduler",
    "rng",
    "data_position",
    "optimizer_moments",
    "grad_scaler",
    "ema_counter",
    "loss_normalisation",
    "clipping_order",
    "orig_mod_keys",
    "sampler_epoch",
    "worker_rng",
)


@dataclass(frozen=True)
class Entry:
    program: str  # e.g. "cnn_bn_sgd_multistep"
    form: str  # "deterministic" | "nondeterministic"
    check: str  # "resume" | "accumulation" | "coverage" | "runs" | "explain"
    run: Callable[[Path], Any]  # runs the check with a fresh work dir, returns the result object
    fault: str | None = None  # None: clean; else one of FAULT_CLASSES
    expect_path: str | None = None  # a fault must show at a difference path starting with this
    expect_step: int | None = None  # ... at this step (None: the step is not asserted)
    fast: bool = False  # part of tests/test_verdict_corpus.py's fast subset
    note: str = ""  # one line: what the program is / what the fault does
