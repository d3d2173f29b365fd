"""Tracing step N of a training script: step boundaries from record() calls or optimizer steps.

`TRAINPARITY_TRACE_STEP=N` and `TRAINPARITY_TRACE_OUTPUT=FILE` (set by
`trainparity trace`, or by hand for a script that calls `trainparity.record`)
ask for a trace of step N. Where a step begins and ends:

- **record() calls**, from a script's first one on: step N is every op
  between the `record()` call for step N-1 and the next `record()` call,
  which must be for step N. `record()`'s own work lies outside (the step
  ends before it records and the next begins after), but the ops that build
  its `state` argument are the step's. Record the state right after building
  or loading as step 0 to trace step 1.
- **optimizer steps**, under `trainparity trace` until the script's first
  `record()` call (or throughout, in a script that never calls it): step N
  runs from the end of the (N-1)-th optimizer step (any optimizer; torch's
  global post-hook), or the start of the script for N = 1, to the end of the
  N-th.

A step that can no longer be told apart (record() went from before step N-1
to step N or past it, or this process's first record() is for step N or
later) raises TraceStepError from record(). A process that ends before step N
ended writes no trace, never a partial one, and says why on stderr.

In a multi-rank job (RANK set, WORLD_SIZE ≥ 2) every rank traces its own
step N into `<stem>.rank<R><suffix>` next to TRAINPARITY_TRACE_OUTPUT.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

from torch.optim.optimizer import register_optimizer_step_post_hook

from trainparity._internal.why.forensics.tracing import TraceSession
from trainparity._internal.why.forensics.variables import (
    TRACE_CAPTURE_VARIABLE,
    TRACE_KEEP_VARIABLE,
    TRACE_OUTPUT_VARIABLE,
    TRACE_STEP_VARIABLE,
)

__all__ = [
    "KEEP_VARIABLE",
    "OUTPUT_VARIABLE",
    "STEP_VARIABLE",
    "StepTracer",
    "TraceStepError",
    "install_from_environment",
]

STEP_VARIABLE = TRACE_STEP_VARIABLE
OUTPUT_VARIABLE = TRACE_OUTPUT_VARIABLE
KEEP_VARIABLE = TRACE_KEEP_VARIABLE

_installed: StepTracer | None = None


class TraceStepError(RuntimeError):
    """record() calls that leave the requested step without a beginning or an end of its own."""


class StepTracer:
    """Starts a trace session when step N begins and writes it when step N ends."""

    def __init__(
        self, step: int, output: str, keep: tuple[str, ...] = (), capture: str = "auto"
    ) -> None:
        if step < 1:
            raise ValueError(f"{STEP_VARIABLE} must be a positive step number, got {step}")
        self.step = step
        self.output = output
        self.keep = keep
        self.capture = capture
        self.optimizer_steps = 0
        self.last_recorded: int | None = None
        self.session: TraceSession | None = None
        # Settled: the trace is written, or record() has said why it never will be.
        self.settled = False
        self._hook: Any = None

    # Optimizer steps ------------------------------------------------------------------

    def follow_optimizers(self) -> None:
        """End a step at every optimizer step (any optimizer), via torch's global post-hook."""
        self._hook = register_optimizer_step_post_hook(
            lambda optimizer, args, kwargs: self._optimizer_stepped()
        )
        if self.step == 1:
            self._begin()

    def _optimizer_stepped(self) -> None:
        self.optimizer_steps += 1
        if self.optimizer_steps == self.step:
            self._write()
        elif self.optimizer_steps == self.step - 1:
            self._begin()

    # record() calls -------------------------------------------------------------------

    def record_arriving(self, step: int) -> None:
        """record(step) was called, before it records: step `step` ends here."""
        if self._hook is not None:  # from now on record() calls, not optimizer steps, count
            self._hook.remove()
            self._hook = None
            if not self.settled:
                self._discard()
        if self.settled:
            return
        if step == self.step and self.session is not None:
            self._write()
        elif step >= self.step:
            self.settled = True
            raise TraceStepError(self._skipped(step))
        else:
            self._discard()  # a record of an earlier step: what was open is not step N
        self.last_recorded = step

    def record_done(self, step: int) -> None:
        """record(step) has recorded: the next step begins here."""
        if not self.settled and step == self.step - 1:
            self._begin()

    def _skipped(self, step: int) -> str:
        wanted = (
            f"{STEP_VARIABLE}={self.step}: step {self.step} runs from record({self.step - 1}) "
            f"to record({self.step})"
        )
        if self.last_recorded is None:
            return (
                f"{wanted}, but this process's first record() call is for step {step}; trace a "
                "step after it (record the state right after building or loading as step 0 to "
                "trace step 1)"
            )
        return (
            f"{wanted}, but record() went from step {self.last_recorded} to step {step}; "
            "trace a step whose previous step is recorded"
        )

    # The session ----------------------------------------------------------------------

    def _begin(self) -> None:
        self._discard()
        self.session = TraceSession(
            self.output,
            model=None,
            inputs=None,
            keep=self.keep,
            step=self.step,
            capture=self.capture,
        )
        self.session.__enter__()

    def _write(self) -> None:
        session, self.session = self.session, None
        self.settled = True
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if session is not None:
            session.__exit__(None, None, None)

    def _discard(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.discard()

    def finish(self) -> None:
        """The script has ended: drop an unfinished session (no partial trace) and say why on stderr."""
        self._discard()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if not self.settled:
            self.settled = True
            print(f"trainparity: no trace written: {self._unfinished()}", file=sys.stderr)

    def _unfinished(self) -> str:
        if self.last_recorded is not None:
            return (
                f"{STEP_VARIABLE}={self.step} but step {self.step} never ended: the last "
                f"record() call was for step {self.last_recorded}"
            )
        return (
            f"{STEP_VARIABLE}={self.step} but step {self.step} never ended: "
            f"{self.optimizer_steps} optimizer step(s) ran and record() was never called"
        )


def _rank_output(output: str) -> str:
    """The trace file of this process: `output`, or `<stem>.rank<R><suffix>` in a multi-rank job.

    Every rank of a torchrun job inherits the same TRAINPARITY_TRACE_OUTPUT;
    without the rank in the name they would overwrite each other's trace.
    """
    rank, world_size = os.environ.get("RANK"), os.environ.get("WORLD_SIZE", "1")
    if rank is None or not rank.isdigit() or not world_size.isdigit() or int(world_size) < 2:
        return output
    head, name = os.path.split(output)
    stem, dot, suffix = name.rpartition(".")
    named = f"{stem}.rank{rank}.{suffix}" if dot and stem else f"{name}.rank{rank}"
    return os.path.join(head, named)


def install_from_environment(*, follow_optimizers: bool = True) -> StepTracer | None:
    """Install a StepTracer when TRAINPARITY_TRACE_STEP is set (once per process), else None.

    follow_optimizers: count optimizer steps until the first record() call
    (`trainparity trace`); record() itself installs the tracer without.
    """
    global _installed
    if _installed is not None or STEP_VARIABLE not in os.environ:
        return _installed
    text = os.environ[STEP_VARIABLE]
    try:
        step = int(text)
    except ValueError:
        raise ValueError(f"{STEP_VARIABLE} must be a step number, got {text!r}") from None
    output = _rank_output(os.environ.get(OUTPUT_VARIABLE) or f"step{step}.trace")
    keep = tuple(item for item in os.environ.get(KEEP_VARIABLE, "").split(",") if item)
    # TRAINPARITY_TRACE_CAPTURE (explain's reruns): "TorchDispatchMode" skips DebugMode's
    # first-use imports, which cost a short rerun about a second.
    capture = os.environ.get(TRACE_CAPTURE_VARIABLE) or "auto"
    _installed = StepTracer(step, output, keep, capture)
    atexit.register(_installed.finish)  # a script that ends early says why there is no trace
    if follow_optimizers:
        _installed.follow_optimizers()
    return _installed
