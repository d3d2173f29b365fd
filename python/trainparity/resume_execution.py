"""One resume check's children, observations and decisions: the execution behind check_resume."""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainparity.comparison import Difference, ExactComparison, ToleranceComparison
from trainparity.distributed import phases as multirank
from trainparity.distributed.resume_coverage import resume_coverage_differences
from trainparity.observer_client import ObservationFailure, ObserverClient
from trainparity.outcomes import Outcome
from trainparity.processes import ChildGroup, ChildLaunchError, ChildResult, ChildSpec
from trainparity.protocols import ProcessExecutionPlan, ProcessResumeCase
from trainparity.recording.resume import (
    ResumeTrajectories,
    TrajectoryError,
    phase_recording_environment,
)
from trainparity.results import ExternalProcessEvidence, ProcessResumeResult
from trainparity.run_setup import RunSettings
from trainparity.snapshot import Snapshot

__all__ = ["ResumeExecution"]

_CONCURRENT_PHASES = ("baseline_a", "baseline_b", "candidate_split")
# Environment variables whose absence or value commonly explains run-to-run drift.
_NONDETERMINISM_VARIABLES = {
    "CUBLAS_WORKSPACE_CONFIG": "CUBLAS_WORKSPACE_CONFIG is unset: cuBLAS may pick non-deterministic algorithms (set ':4096:8' with torch.use_deterministic_algorithms(True))",
    "PYTHONHASHSEED": "PYTHONHASHSEED is unset: str hashes, and so set/dict iteration over str, differ per process",
    "OMP_NUM_THREADS": "OMP_NUM_THREADS is unset: CPU reductions may be split differently when the thread count changes",
}


class _PhaseError(Exception):
    """A phase could not run or be observed; carries the verdict to return."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


def _path_bytes(path: Path) -> int:
    if path.is_dir():
        return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file())
    return path.stat().st_size


@dataclass
class _Phase:
    """Book-keeping of one training child."""

    name: str
    end_step: int
    resume_from: Path | None = None
    run_dir: Path | None = None
    started: bool = False
    tag: str | None = None  # in the phase's environment; what multirank.sweep kills
    result: ChildResult | None = None
    error: _PhaseError | None = None


class ResumeExecution:
    """One check's children, observations and decisions."""

    def __init__(
        self,
        *,
        case_spec: str,
        case: ProcessResumeCase,
        policy: ExactComparison | ToleranceComparison,
        settings: RunSettings,
        staged_checkpoint_hook: Callable[[Path], None] | None,
    ) -> None:
        self.case_spec = case_spec
        self.case = case
        self.policy = policy
        self.settings = settings
        self.staged_checkpoint_hook = staged_checkpoint_hook
        self.phases = {
            "baseline_a": _Phase("baseline_a", case.total_step),
            "baseline_b": _Phase("baseline_b", case.total_step),
            "candidate_split": _Phase("candidate_split", case.split_step),
            "candidate_resume": _Phase("candidate_resume", case.total_step),
        }
        self.group = ChildGroup(on_event=self._on_child_event)
        self.observer = ObserverClient(
            group=self.group,
            case_spec=case_spec,
            snapshot_dir=settings.run_root / "snapshots",
            cwd=settings.command_dir,
            environment=settings.environment,
            timeout=settings.timeout,
            progress=settings.progress,
        )
        self.timings: dict[str, float] = {}
        self.processes: list[ExternalProcessEvidence] = []
        self.snapshot_ipc_bytes = 0
        self.checkpoint_max_bytes = 0

    # The decision sequence ----------------------------------------------------------

    def run(self, fields: dict[str, Any], started: float) -> ProcessResumeResult:
        # After the group is closed, whatever still carries a phase tag (ranks) is killed.
        with multirank.swept(self._phase_tags), self.group:
            try:
                if self.settings.parallel:
                    self.observer.start()
                    for name in _CONCURRENT_PHASES:
                        self._start(self.phases[name])
                result = self._decide(fields)
            except _PhaseError as failure:
                result = self._result(fields, failure.outcome, failure.message)
            self.observer.stop()
        timing = dict(self.timings)
        timing["total_wall"] = time.perf_counter() - started
        if result.outcome in (Outcome.PASS, Outcome.FAIL):
            timing["single_normal_run"] = timing["baseline_a"]
            if timing["single_normal_run"] > 0:
                timing["end_to_end_multiplier"] = timing["total_wall"] / timing["single_normal_run"]
        return dataclasses.replace(
            result, timing_seconds=timing, processes=tuple(self._ordered_processes())
        )

    def _decide(self, fields: dict[str, Any]) -> ProcessResumeResult:
        snapshot_a = self._trained_and_observed("baseline_a")
        snapshot_b = self._trained_and_observed("baseline_b")
        trajectories = ResumeTrajectories(self.settings.run_root, self.policy, self.case.split_step)
        parted = _recorded(trajectories.baselines_part)
        began = time.perf_counter()
        baseline_differences = self.policy.compare_all(snapshot_a, snapshot_b)
        self.timings["baseline_comparison"] = time.perf_counter() - began
        self.timings["baseline_self_consistency"] = sum(
            self.timings.get(key, 0.0)
            for key in (
                "baseline_a",
                "baseline_b",
                "snapshot_baseline_a",
                "snapshot_baseline_b",
                "baseline_comparison",
            )
        )
        total = self.case.total_step
        step, first_differences = _first_divergence(parted, total, baseline_differences)
        if first_differences:
            at_step = f" at step {step}" if parted is not None else ""
            return self._result(
                fields,
                Outcome.ABSTAIN,
                f"baseline self-consistency failed{at_step}; resume attribution is unsafe",
                first_divergent_step=step,
                primary_difference=first_differences[0],
                all_differences=first_differences,
                nondeterminism_hints=self._nondeterminism_hints(),
                **trajectories.report_fields(baseline_differences),
            )
        split_checkpoint = self._trained("candidate_split")
        staged = self._stage(split_checkpoint)
        resumed_checkpoint = self._trained("candidate_resume", resume_from=staged)
        split_pid = self.phases["candidate_split"].result.pid
        resume_pid = self.phases["candidate_resume"].result.pid
        if split_pid == resume_pid:
            raise _PhaseError(
                Outcome.ERROR, "save/exit and load/resume did not prove distinct process IDs"
            )
        snapshot_resume = self._observed("candidate_resume", resumed_checkpoint)
        parted = _recorded(trajectories.candidates_part)
        began = time.perf_counter()
        differences = self.policy.compare_all(snapshot_a, snapshot_resume)
        # Sample order first: a resume that repeats or skips samples explains the states.
        differences = (*resume_coverage_differences(self.settings.run_root), *differences)
        self.timings["candidate_comparison"] = time.perf_counter() - began
        self.timings["comparison"] = (
            self.timings["baseline_comparison"] + self.timings["candidate_comparison"]
        )
        self.timings["candidate_save_exit_new_process_load_resume"] = sum(
            self.timings.get(key, 0.0)
            for key in (
                "candidate_save_exit",
                "checkpoint_staging",
                "candidate_new_process_load_resume",
            )
        )
        recorded = trajectories.report_fields(differences)
        step, first_differences = _first_divergence(parted, total, differences)
        if first_differences:
            return self._result(
                fields,
                Outcome.FAIL,
                f"first observed divergence at step {step}: {first_differences[0].path}",
                first_divergent_step=step,
                primary_difference=first_differences[0],
                all_differences=first_differences,
                fresh_resume_processes_distinct=True,
                **recorded,
            )
        wording = (
            "exactly equivalent"
            if isinstance(self.policy, ExactComparison)
            else "equivalent under the declared tolerance"
        )
        return self._result(
            fields,
            Outcome.PASS,
            f"final states are {wording} at step {total}",
            fresh_resume_processes_distinct=True,
            **recorded,
        )

    def _result(
        self, fields: dict[str, Any], outcome: Outcome, message: str, **extra: Any
    ) -> ProcessResumeResult:
        return ProcessResumeResult(
            outcome=outcome,
            message=message,
            snapshot_ipc_bytes=self.snapshot_ipc_bytes,
            checkpoint_max_bytes=self.checkpoint_max_bytes,
            **fields,
            **extra,
        )

    # Phases ---------------------------------------------------------------------------

    def _trained_and_observed(self, name: str) -> Snapshot:
        return self._observed(name, self._trained(name))

    def _observed(self, name: str, checkpoint: Path) -> Snapshot:
        try:
            observation = self.observer.observe(name, checkpoint)
        except ObservationFailure as failure:
            raise _PhaseError(failure.outcome, failure.message) from None
        self.timings[f"snapshot_{name}"] = observation.seconds
        for key, seconds in observation.child_timings.items():
            target = "snapshot_capture" if key == "capture" else key
            self.timings[target] = self.timings.get(target, 0.0) + seconds
        self.snapshot_ipc_bytes += observation.file_bytes
        return observation.snapshot

    def _trained(self, name: str, resume_from: Path | None = None) -> Path:
        """Run (or finish waiting for) a training child; return its checkpoint path."""
        phase = self.phases[name]
        if resume_from is not None:
            phase.resume_from = resume_from
        if not phase.started:
            self._start(phase)
        if phase.error is None:  # else the command callback or the launch failed
            if phase.result is None:
                self.group.wait_for(name)
            self._account(phase)
        if phase.error is not None:
            raise phase.error
        return self._checkpoint_after(phase)

    def _start(self, phase: _Phase) -> None:
        phase.started = True
        phase.run_dir = self.settings.run_root / phase.name
        phase.run_dir.mkdir(parents=True, exist_ok=True)
        plan = ProcessExecutionPlan(
            phase=phase.name,
            cwd=self.settings.command_dir,
            run_dir=phase.run_dir,
            end_step=phase.end_step,
            resume_from=phase.resume_from,
        )
        try:
            argv = list(_validated_command(self.case.command(plan)))
        except Exception as error:
            phase.error = _PhaseError(
                Outcome.ERROR,
                f"{phase.name} command callback or validation failed: {type(error).__name__}",
            )
            return
        problem = self.settings.parallel and multirank.concurrency_problem(
            phase.name, argv, self.settings.environment
        )
        if problem:
            phase.error = _PhaseError(Outcome.ERROR, problem)
            return
        environment, phase.tag = multirank.phase_environment(
            argv,
            {
                **self.settings.environment,
                **phase_recording_environment(
                    self.settings.run_root, phase.name, self.case.split_step
                ),
            },
            phase.run_dir,
        )
        try:
            spec = ChildSpec(
                name=phase.name,
                argv=argv,
                cwd=self.settings.command_dir,
                env=environment,
                stdout_path=phase.run_dir / "stdout.log",
                stderr_path=phase.run_dir / "stderr.log",
            )
            self.group.start(spec, timeout=self.settings.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError):
            phase.error = _PhaseError(
                Outcome.ERROR, self._hinted(phase.name, f"{phase.name} child launch failed")
            )

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        if name not in self.phases:
            return
        self.settings.progress.event(
            name, kind, result.wall_seconds if result is not None else None
        )
        if kind == "end":
            self.phases[name].result = result
            multirank.sweep(self.phases[name].tag)  # ranks that left the child's process group

    def _phase_tags(self) -> list[str]:
        return [phase.tag for phase in self.phases.values() if phase.tag is not None]

    def _account(self, phase: _Phase) -> None:
        """Record how a finished child ended, when the decision sequence reaches it.

        Evidence of children that ran early (concurrently) but whose phase the
        verdict never reached is left out, so a report does not depend on
        scheduling.
        """
        result = phase.result
        name = phase.name
        if result.timed_out:
            phase.error = _PhaseError(
                Outcome.ERROR, self._hinted(name, f"{name} child exceeded timeout")
            )
            return
        returncode = result.exit_code if result.exit_code is not None else -(result.signal or 0)
        self.processes.append(
            ExternalProcessEvidence(
                phase=name,
                pid=result.pid,
                elapsed_seconds=result.wall_seconds,
                returncode=returncode,
                signal=result.signal,
                user_seconds=result.user_seconds,
                system_seconds=result.sys_seconds,
                peak_rss_bytes=result.peak_rss_bytes,
            )
        )
        if returncode != 0:
            self.timings[name] = result.wall_seconds
            message = f"{name} child exited with status {returncode}"
            rank_detail = multirank.rank_failure(phase.run_dir / "stderr.log", phase.run_dir)
            if rank_detail:
                message += f": {rank_detail}"
            phase.error = _PhaseError(Outcome.ERROR, self._hinted(name, message))
            return
        key = {
            "candidate_split": "candidate_save_exit",
            "candidate_resume": "candidate_new_process_load_resume",
        }
        self.timings[key.get(name, name)] = result.wall_seconds

    def _checkpoint_after(self, phase: _Phase) -> Path:
        try:
            checkpoint = self.case.checkpoint_path(phase.run_dir)
            if not isinstance(checkpoint, Path):
                raise TypeError(
                    f"checkpoint_path must return a pathlib.Path, got {type(checkpoint).__name__}"
                )
        except Exception as error:
            self.timings.setdefault(phase.name, phase.result.wall_seconds)
            raise _PhaseError(
                Outcome.ERROR,
                f"{phase.name} checkpoint path resolution after child completion failed: {type(error).__name__}",
            ) from None
        if not (checkpoint.is_file() or checkpoint.is_dir()):
            self.timings.setdefault(phase.name, phase.result.wall_seconds)
            raise _PhaseError(
                Outcome.ERROR,
                self._hinted(phase.name, f"{phase.name} did not create its declared checkpoint"),
            )
        self.checkpoint_max_bytes = max(self.checkpoint_max_bytes, _path_bytes(checkpoint))
        return checkpoint

    def _stage(self, split_checkpoint: Path) -> Path:
        """Copy the split checkpoint to where candidate_resume's location contract says it lives."""
        began = time.perf_counter()
        resume_dir = self.settings.run_root / "candidate_resume"
        resume_dir.mkdir(parents=True, exist_ok=True)
        try:
            staged = self.case.checkpoint_path(resume_dir)
            if not isinstance(staged, Path):
                raise TypeError(
                    f"checkpoint_path must return a pathlib.Path, got {type(staged).__name__}"
                )
        except Exception as error:
            raise _PhaseError(
                Outcome.ERROR,
                f"candidate_resume checkpoint path resolution before child launch failed: {type(error).__name__}",
            ) from None
        try:
            staged.parent.mkdir(parents=True, exist_ok=True)
            if split_checkpoint.is_dir():
                shutil.copytree(
                    split_checkpoint, staged, copy_function=shutil.copy2, dirs_exist_ok=True
                )
            else:
                shutil.copy2(split_checkpoint, staged)
            if self.staged_checkpoint_hook is not None:
                self.staged_checkpoint_hook(staged)
        except Exception as error:
            raise _PhaseError(
                Outcome.ERROR, f"candidate_resume checkpoint staging failed: {type(error).__name__}"
            ) from None
        self.timings["checkpoint_staging"] = time.perf_counter() - began
        return staged

    def _hinted(self, phase: str, message: str) -> str:
        if not self.settings.preserved:
            return message
        return f"{message}; see {phase}/stderr.log under the preserved work_dir"

    def _ordered_processes(self) -> list[ExternalProcessEvidence]:
        order = {name: index for index, name in enumerate(self.phases)}
        return sorted(self.processes, key=lambda evidence: order[evidence.phase])

    def _nondeterminism_hints(self) -> tuple[str, ...]:
        return tuple(
            hint
            for variable, hint in _NONDETERMINISM_VARIABLES.items()
            if variable not in self.settings.environment
        )


def _first_divergence(
    parted: Any, total_step: int, final_differences: tuple[Difference, ...]
) -> tuple[int, tuple[Difference, ...]]:
    """(step, differences) of the first divergence: a recorded step's, else the final state's."""
    if parted is not None:
        return parted.step, parted.differences
    return total_step, final_differences


def _recorded(part: Callable[[], Any]) -> Any:
    """One step of the trajectory comparison; unusable recordings are the check's ERROR."""
    try:
        return part()
    except TrajectoryError as error:
        raise _PhaseError(Outcome.ERROR, str(error)) from None


def _validated_command(command: object) -> list[str]:
    if isinstance(command, (str, bytes)):
        raise TypeError(
            "command() must return a sequence of str such as [sys.executable, 'train.py'], not one string"
        )
    argv = list(command)  # type: ignore[call-overload]
    if not argv or not all(isinstance(item, str) and "\0" not in item for item in argv):
        raise TypeError("command() must return a non-empty sequence of str without NUL characters")
    return argv
