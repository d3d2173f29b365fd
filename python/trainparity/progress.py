"""Progress of a check: phase start/end events for callbacks, stderr lines or notebooks."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainparity.terminal_text import printable


@dataclass(frozen=True)
class ProgressEvent:
    """One phase started or ended; `elapsed_seconds` is the phase's own time (end only)."""

    phase: str
    kind: str  # "start" or "end"
    elapsed_seconds: float | None
    since_check_start_seconds: float


ProgressCallback = Callable[[ProgressEvent], None]


def _print_to_stderr(event: ProgressEvent) -> None:
    if event.kind == "start":
        line = f"trainparity: {event.phase} started"
    else:
        line = f"trainparity: {event.phase} finished in {event.elapsed_seconds:.2f} s"
    text = f"{line} (t+{event.since_check_start_seconds:.2f} s)"
    print(printable(text), file=sys.stderr, flush=True)


class ProgressReporter:
    """Turns `progress=` (None/False, True, or a callable) into events."""

    def __init__(self, progress: bool | ProgressCallback | None) -> None:
        if progress is None or progress is False:
            self.callback: ProgressCallback | None = None
        elif progress is True:
            self.callback = _print_to_stderr
        elif callable(progress):
            self.callback = progress
        else:
            raise TypeError(
                f"progress must be a bool or a callable taking a ProgressEvent, not {type(progress).__name__}"
            )
        self.started = time.perf_counter()

    def event(self, phase: str, kind: str, elapsed_seconds: float | None = None) -> None:
        if self.callback is not None:
            self.callback(
                ProgressEvent(phase, kind, elapsed_seconds, time.perf_counter() - self.started)
            )
