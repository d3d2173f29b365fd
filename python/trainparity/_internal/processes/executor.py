"""The executor seam: what runs a check's training phases, here (a ChildGroup) or elsewhere.

A check's training children go through a PhaseLauncher; the observer
worker and the verdict always stay in the checking process. By default the
launcher is the check's own ChildGroup (fresh local processes);
`executor=...` (trainparity.executors.SlurmExecutor) hands the phases to a
scheduler instead. The launcher reports each phase's start and end through
the same `on_event` callback a ChildGroup calls, with a ChildResult whose
`job_id`/`job_state` say which job ran it and how the scheduler saw it end.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from trainparity._internal.processes.group import ChildResult, ChildSpec, EventCallback
from trainparity._internal.processes.progress import ProgressReporter

__all__ = ["PhaseExecutor", "PhaseLauncher", "bind_local_launcher", "replays"]


class PhaseLauncher(Protocol):
    """Starts phases and waits for them; `close()` stops every one still running (no orphans).

    A launcher that only reads what phases left elsewhere (`trainparity judge`) also has
    `replays(phase) -> bool` (see `replays`), and `bind_local(launcher)` when some of its
    phases run here through the check's own launcher.
    """

    def start(self, spec: ChildSpec, *, timeout: float | None) -> object: ...

    def wait_for(self, name: str, timeout: float | None = None) -> ChildResult | None: ...

    def close(self) -> None: ...


@runtime_checkable
class PhaseExecutor(Protocol):
    """Makes the launcher of one check: `run_root` is the check's run directory."""

    def launcher(
        self, *, run_root: Path, on_event: EventCallback, progress: ProgressReporter
    ) -> PhaseLauncher: ...


def replays(launcher: object, phase: str) -> bool:
    """Whether `launcher` only reads `phase`'s outputs, run elsewhere: the check then stages,
    clears and removes nothing of that phase (its outputs are the evidence)."""
    replaying = getattr(launcher, "replays", None)
    return bool(replaying(phase)) if callable(replaying) else False


def bind_local_launcher(launcher: object, local: PhaseLauncher) -> None:
    """Give `launcher` the check's own launcher, where it runs some phases here."""
    bind = getattr(launcher, "bind_local", None)
    if callable(bind):
        bind(local)
