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

With `run_missing` (`trainparity judge DIR --run-missing`), each phase that
has no result file when judge starts runs here instead, as the check would
run it (the check's own launch: warm or fresh, its checkpoint staged first,
a self-resuming job's checkpoint path cleared), and then gets the result
file its script would have written, so that a later judge reads it. The
phases with a result file are read as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.processes.executor import PhaseLauncher
from trainparity._internal.processes.group import ChildResult, ChildSpec, EventCallback
from trainparity._internal.processes.progress import ProgressReporter

__all__ = ["PHASE_RESULT_FILE", "PLAN_FILE", "PlanReplay"]

PHASE_RESULT_FILE = "phase-result.json"
PLAN_FILE = "plan.json"  # what `trainparity resume --plan-only DIR` writes (resume/plan.py)


@dataclass(frozen=True)
class PlanReplay:
    """The executor of `trainparity judge`: reads the phases' outputs under `directory`.

    `run_missing`: the phases without a result file run here (the module's docstring).
    """

    directory: Path
    run_missing: bool = False

    def launcher(
        self, *, run_root: Path, on_event: EventCallback, progress: ProgressReporter
    ) -> ReplayLauncher:
        directory = Path(self.directory)
        here = _phases_without_result(directory) if self.run_missing else frozenset()
        return ReplayLauncher(directory, on_event, run_here=here)


class ReplayLauncher:
    """A PhaseLauncher whose phases have already run (processes/executor.py), but those in
    `run_here`, which the check's own launcher (`bind_local`) runs."""

    def __init__(
        self, directory: Path, on_event: EventCallback, *, run_here: frozenset[str] = frozenset()
    ) -> None:
        self.directory = directory
        self.on_event = on_event
        self.run_here = run_here
        self.local: PhaseLauncher | None = None
        self.specs: dict[str, ChildSpec] = {}

    def bind_local(self, local: PhaseLauncher) -> None:
        """The check's own launcher, for the phases that run here (it reports their events)."""
        self.local = local

    def replays(self, phase: str) -> bool:
        """Whether `phase` ran elsewhere: the check then stages, clears and removes nothing of it
        (its outputs are the evidence)."""
        return phase not in self.run_here

    def start(self, spec: ChildSpec, *, timeout: float | None) -> None:
        self.specs[spec.name] = spec
        if spec.name in self.run_here:
            self._local().start(spec, timeout=timeout)
            return
        self.on_event(spec.name, "start", None)

    def wait_for(self, name: str, timeout: float | None = None) -> ChildResult | None:
        spec = self.specs.pop(name, None)
        if spec is None:
            return None
        if name in self.run_here:
            result = self._local().wait_for(name, timeout)
            if result is not None:
                _record_result(spec, result)
            return result
        result = _recorded_result(spec, self.directory / f"{name}.sh")
        self.on_event(name, "end", result)
        return result

    def close(self) -> None:
        self.specs.clear()

    def _local(self) -> PhaseLauncher:
        if self.local is None:
            raise RuntimeError("a phase runs here, but the check bound no launcher of its own")
        return self.local


def _phases_without_result(directory: Path) -> frozenset[str]:
    """The plan's phases whose run directory holds no result file yet."""
    try:
        plan = json.loads((directory / PLAN_FILE).read_text(encoding="utf-8"))
        names = [str(phase["name"]) for phase in plan["phases"]]
    except (OSError, ValueError, KeyError, TypeError):
        return frozenset()  # judge reads the plan first and says what is wrong with it
    return frozenset(name for name in names if not (directory / name / PHASE_RESULT_FILE).exists())


def _record_result(spec: ChildSpec, result: ChildResult) -> None:
    """What the phase's script writes when its command ends: the exit status as the shell
    gives it (128 + the signal that ended it) and the PID."""
    if result.exit_code is not None:
        status = result.exit_code
    elif result.signal is not None:
        status = 128 + result.signal
    else:
        return  # it never ran (its launch failed): no result, as a script that could not start
    path = spec.stdout_path.parent / PHASE_RESULT_FILE
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps({"exit_code": status, "pid": result.pid}) + "\n", "utf-8")
    temporary.replace(path)


def _recorded_result(spec: ChildSpec, script: Path) -> ChildResult:
    """What the phase's script recorded; a missing or unreadable record is a job without result."""
    path = spec.stdout_path.parent / PHASE_RESULT_FILE
    state = None
    exit_code, pid = None, 0
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        exit_code, pid = int(record["exit_code"]), int(record["pid"])
    except FileNotFoundError:
        state = (
            f"without writing {path} "
            f"(run {script.name} or judge with --run-missing, or it was stopped)"
        )
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
