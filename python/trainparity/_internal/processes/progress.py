"""Progress of a check: phase start/end events for callbacks, stderr lines or notebooks."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainparity._internal.reports.terminal_text import printable


@dataclass(frozen=True)
class ProgressEvent:
    """One phase (or one rank of a torchrun phase) started or ended.

    `elapsed_seconds` is the phase's (the rank's) own time, on "end" only. Rank
    events come from a sampling thread, so a callback may be called from it.
    """

    phase: str
    # "start" or "end"; "state": a scheduler's news of a phase's job, in `detail`; "note": a
    # remark on the whole check, said once (e.g. why no phase shares a warm server), in `detail`
    kind: str
    elapsed_seconds: float | None
    since_check_start_seconds: float
    rank: int | None = None
    detail: str | None = None  # e.g. a rank's pid, and its sampled CPU time and peak RSS


ProgressCallback = Callable[[ProgressEvent], None]


def _print_to_stderr(event: ProgressEvent) -> None:
    if event.kind == "note":
        print(printable(f"trainparity: {event.detail}"), file=sys.stderr, flush=True)
        return
    who = event.phase if event.rank is None else f"{event.phase} rank {event.rank}"
    if event.kind == "state":
        text = f"trainparity: {who}: {event.detail} (t+{event.since_check_start_seconds:.2f} s)"
        print(printable(text), file=sys.stderr, flush=True)
        return
    if event.kind == "start":
        line = f"trainparity: {who} started"
    else:
        line = f"trainparity: {who} finished in {event.elapsed_seconds:.2f} s"
    detail = f"; {event.detail}" if event.detail else ""
    text = f"{line} (t+{event.since_check_start_seconds:.2f} s{detail})"
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

    def event(
        self,
        phase: str,
        kind: str,
        elapsed_seconds: float | None = None,
        *,
        rank: int | None = None,
        detail: str | None = None,
    ) -> None:
        if self.callback is not None:
            since = time.perf_counter() - self.started
            self.callback(ProgressEvent(phase, kind, elapsed_seconds, since, rank, detail))

    def note(self, text: str) -> None:
        """A remark on the whole check (phase ""), said once by whoever has it to say."""
        self.event("", "note", detail=text)
