"""What record() does for the crash check (crashes/): log each step's time, and die after one.

The crash check (docs/crashes.md) sets these variables for the runs it makes:
`TRAINPARITY_CRASH_STEP_LOG=FILE` appends "rank step monotonic_ns" per
record() call, which places each traced file-system call of the job between
two steps; `TRAINPARITY_CRASH_AFTER_STEP=K` kills the process with SIGKILL
right after record(K) has written step K (a crash "between steps"), on the
rank `TRAINPARITY_CRASH_RANK` names (default 0). SIGKILL, not an exception:
the job gets no chance to clean up, as when a node dies. Without the
variables this costs one dictionary lookup per record() call.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = [
    "CRASH_AFTER_STEP_VARIABLE",
    "CRASH_RANK_VARIABLE",
    "STEP_LOG_VARIABLE",
    "after_record",
]

STEP_LOG_VARIABLE = "TRAINPARITY_CRASH_STEP_LOG"
CRASH_AFTER_STEP_VARIABLE = "TRAINPARITY_CRASH_AFTER_STEP"
CRASH_RANK_VARIABLE = "TRAINPARITY_CRASH_RANK"


def after_record(step: int, rank: int) -> None:
    """Called by record() once step `step` is written: log its time, die when asked to."""
    log = os.environ.get(STEP_LOG_VARIABLE)
    if log:
        line = f"{rank} {step} {time.monotonic_ns()}\n".encode()
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(descriptor, line)  # one short append: atomic against the other ranks'
        finally:
            os.close(descriptor)
    crash_at = os.environ.get(CRASH_AFTER_STEP_VARIABLE)
    if crash_at is None or not crash_at.strip():
        return
    if int(crash_at) == step and rank == int(os.environ.get(CRASH_RANK_VARIABLE, "0") or 0):
        os.kill(os.getpid(), signal.SIGKILL)
