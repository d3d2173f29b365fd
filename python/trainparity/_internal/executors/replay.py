"""PlanReplay: the phases of a check already ran elsewhere, from a plan; their outputs are read.

`trainparity resume --plan-only DIR` writes one shell script per phase
(resume/plan.py); each script leaves its phase's checkpoint, logs, any
`record()` recordings and a small `phase-result.json` (exit status, PID) in
the phase's directory under DIR. `trainparity judge DIR` runs the same
check with this executor: starting a phase launches nothing, waiting for it
reads its result file, and everything after that (observation, staging
checks, comparison, report) is the check's own code, so the verdict and the
report are those of a check that ran the phases itself. A phase without its
result file is the check's ERROR, naming the phase and its script.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.processes.group import ChildResult, ChildSpec, EventCallback
from trainparity._internal.processes.progress import ProgressReporter

__all__ = ["PHASE_RESULT_FILE", "PlanReplay"]

PHASE_RESULT_FILE = "phase-result.json"


@dataclass(frozen=True)
class PlanReplay:
    """The executor of `trainparity judge`: reads the phases' outputs under `directory`."""

    directory: Path

    def launcher(
        self, *, run_root: Path, on_event: EventCallback, progress: ProgressReporter
    ) -> ReplayLauncher:
        return ReplayLauncher(Path(self.directory), on_event)


class ReplayLauncher:
    """A PhaseLauncher whose phases have already run (processes/executor.py)."""

    replays = True  # the check must not stage a checkpoint over the resumed run's output

    def __init__(self, directory: Path, on_event: EventCallback) -> None:
        self.directory = directory
        self.on_event = on_event
        self.specs: dict[str, ChildSpec] = {}

    def start(self, spec: ChildSpec, *, timeout: float | None) -> None:
        self.specs[spec.name] = spec
        self.on_event(spec.name, "start", None)

    def wait_for(self, name: str, timeout: float | None = None) -> ChildResult | None:
        spec = self.specs.pop(name, None)
        if spec is None:
            return None
        result = _recorded_result(spec, self.directory / f"{name}.sh")
        self.on_event(name, "end", result)
        return result

    def close(self) -> None:
        self.specs.clear()


def _recorded_result(spec: ChildSpec, script: Path) -> ChildResult:
    """What the phase's script recorded; a missing or unreadable record is a job without result."""
    path = spec.stdout_path.parent / PHASE_RESULT_FILE
    state = None
    exit_code, pid = None, 0
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        exit_code, pid = int(record["exit_code"]), int(record["pid"])
    except FileNotFoundError:
        state = f"without writing {path} (run {script.name}, or it was stopped)"
    except (OSError, ValueError, KeyError, TypeError):
        state = f"with an unreadable {path}"
    return ChildResult(
        name=spec.name,
        pid=pid,
        exit_code=exit_code,
        signal=None,
        timed_out=False,
        wall_seconds=0.0,
        user_seconds=0.0,
        sys_seconds=0.0,
        peak_rss_bytes=0,
        job_id=str(script),
        job_state=state or "COMPLETED",
    )
