"""Tracing step N of an unmodified training script: step boundaries from optimizer steps or record().

`TRAINPARITY_TRACE_STEP=N` and `TRAINPARITY_TRACE_OUTPUT=FILE` (set by
`trainparity trace`) ask for a trace of step N: the ops from the end of step
N-1 (the start of the process for N = 1) to the end of step N. A step ends
at each optimizer step (torch's global optimizer step post-hook) or, in a
loop that calls `trainparity.record(step, state)`, at each record() call:
`record_boundary(step)` is the hook record() calls.
"""

from __future__ import annotations

import os
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook

from trainparity.forensics.tracing import TraceSession

__all__ = [
    "KEEP_VARIABLE",
    "OUTPUT_VARIABLE",
    "STEP_VARIABLE",
    "StepTracer",
    "install_from_environment",
    "record_boundary",
]

STEP_VARIABLE = "TRAINPARITY_TRACE_STEP"
OUTPUT_VARIABLE = "TRAINPARITY_TRACE_OUTPUT"
KEEP_VARIABLE = "TRAINPARITY_TRACE_KEEP"

_installed: StepTracer | None = None


class StepTracer:
    """Starts a trace session when step N begins and writes it when step N ends."""

    def __init__(self, step: int, output: str, keep: tuple[str, ...] = ()) -> None:
        if step < 1:
            raise ValueError(f"{STEP_VARIABLE} must be a positive step number, got {step}")
        self.step = step
        self.output = output
        self.keep = keep
        self.completed_steps = 0
        self.session: TraceSession | None = None
        self.done = False
        self._hook: Any = None

    def start_if_due(self) -> None:
        if not self.done and self.session is None and self.completed_steps == self.step - 1:
            self.session = TraceSession(
                self.output, model=None, inputs=None, keep=self.keep, step=self.step,
                capture="auto",
            )  # fmt: skip
            self.session.__enter__()

    def step_ended(self, step: int | None = None) -> None:
        """One step has ended (its number, when the caller knows it: record()'s step)."""
        self.completed_steps = self.completed_steps + 1 if step is None else step
        if self.session is not None and self.completed_steps >= self.step:
            session, self.session = self.session, None
            session.__exit__(None, None, None)
            self.done = True
            if self._hook is not None:
                self._hook.remove()
        self.start_if_due()

    def follow_optimizers(self) -> None:
        """End a step at every optimizer step (any optimizer), via torch's global post-hook."""
        self._hook = register_optimizer_step_post_hook(
            lambda optimizer, args, kwargs: self.step_ended()
        )


def install_from_environment(*, follow_optimizers: bool = True) -> StepTracer | None:
    """Install a StepTracer when TRAINPARITY_TRACE_STEP is set (once per process), else None."""
    global _installed
    if _installed is not None or STEP_VARIABLE not in os.environ:
        return _installed
    text = os.environ[STEP_VARIABLE]
    try:
        step = int(text)
    except ValueError:
        raise ValueError(f"{STEP_VARIABLE} must be a step number, got {text!r}") from None
    output = os.environ.get(OUTPUT_VARIABLE) or f"step{step}.trace"
    keep = tuple(item for item in os.environ.get(KEEP_VARIABLE, "").split(",") if item)
    _installed = StepTracer(step, output, keep)
    if follow_optimizers:
        _installed.follow_optimizers()
    _installed.start_if_due()
    return _installed


def record_boundary(step: int) -> None:
    """The hook `trainparity.record(step, state)` calls: step `step` has ended.

    With TRAINPARITY_TRACE_STEP=N the trace starts at record(N-1) and is
    written at record(N), so record the initial state as step 0 to trace step 1.
    """
    tracer = install_from_environment(follow_optimizers=False)
    if tracer is not None and tracer._hook is None:
        tracer.step_ended(step)
