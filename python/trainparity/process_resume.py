"""check_resume: resume parity through real processes — baselines, split, fresh-process resume.

Order of decisions follows CONTRACT §6.4: setup; baseline_a and baseline_b
(each trained, then observed); baseline self-consistency (else ABSTAIN);
candidate_split; staging of its checkpoint; candidate_resume in a fresh
process; its observation; the final comparison. Independent children
(baseline_a, baseline_b, candidate_split and the observer worker) run
concurrently by default; verdicts are still decided in that order, so the
comparison part of the report is the same either way.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainparity.comparison import ExactComparison, ToleranceComparison
from trainparity.distributed import phases as multirank
from trainparity.distributed.resume_coverage import resume_coverage_differences
from trainparity.environment import environment_fingerprint
from trainparity.importing import case_module_name, load_process_case
from trainparity.observer_client import ObservationFailure, ObserverClient
from trainparity.outcomes import Outcome
from trainparity.processes import ChildGroup, ChildLaunchError, ChildResult, ChildSpec
from trainparity.progress import ProgressCallback, ProgressReporter
from trainparity.protocols import ProcessExecutionPlan, ProcessResumeCase
from trainparity.reports import write_report
from trainparity.results import ExternalProcessEvidence, ProcessResumeResult
from trainparity.run_setup import checked_parallel, checked_timeout, run_root, wants_parallel
from trainparity.snapshot import Snapshot

__all__ = ["ProcessResumeRunner", "check_resume"]

_CANDIDATE_PHASES = ("candidate_split", "candidate_resume")
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


def check_resume(
    case: str,
    *,
    comparison: ExactComparison | ToleranceComparison | None = None,
    cwd: Path | None = None,
    work_dir: Path | None = None,
    report_path: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    parallel: bool | None = None,
    progress: bool | ProgressCallback | None = None,
) -> ProcessResumeResult:
    """Check that save → exit → fresh-process load → continue reproduces uninterrupted training.

    `case` is an importable "package.module:ClassName" implementing
    ProcessResumeCase. `timeout` applies to each child. `parallel=None` runs
    the independent phases concurrently on CPU and sequentially when the case
    declares `device = "cuda..."`; True/False force it. `progress=True`
    prints phase start/end lines to stderr; a callable receives ProgressEvent
    objects. Returns PASS, FAIL (first divergent path), ABSTAIN or ERROR.
    """
    runner = ProcessResumeRunner(
        comparison=comparison,
        timeout=timeout,
        temporary_root=temporary_root,
        parallel=parallel,
        progress=progress,
    )
    return runner.run(
        case, cwd=cwd, work_dir=work_dir, report_path=report_path, environment=environment
    )


class ProcessResumeRunner:
    """Runs one resume check; the internal object behind check_resume (CONTRACT §1.4)."""

    def __init__(
        self,
        *,
        comparison: ExactComparison | ToleranceComparison | None = None,
        timeout: float = 300.0,
        temporary_root: Path | None = None,
        parallel: bool | None = None,
        progress: bool | ProgressCallback | None = None,
    ) -> None:
        timeout = checked_timeout(timeout)
        checked_parallel(parallel)
        if comparison is not None and not isinstance(
            comparison, (ExactComparison, ToleranceComparison)
        ):
            raise TypeError("comparison must be explicit ExactComparison or ToleranceComparison")
        self.policy = comparison if comparison is not None else ExactComparison()
        self.timeout = float(timeout)
        self.temporary_root = Path(temporary_root) if temporary_root is not None else None
        self.parallel = parallel
        self.progress = ProgressReporter(progress)

    def run(
        self,
        case: str,
        *,
        cwd: Path | None = None,
        work_dir: Path | None = None,
        report_path: Path | None = None,
        environment: Mapping[str, str] | None = None,
        staged_checkpoint_hook: Callable[[Path], None] | None = None,
    ) -> ProcessResumeResult:
        started = time.perf_counter()
        command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
        propagated = tuple(sorted(environment)) if environment is not None else ()
        fields: dict[str, Any] = {
            "case": case,
            "propagated_environment_keys": propagated,
            **self._policy_fields(),
        }
        try:
            loaded, child_environment = _setup(case, environment)
        except Exception as error:
            fields["timing_seconds"] = {"total_wall": time.perf_counter() - started}
            result = ProcessResumeResult(
                outcome=Outcome.ERROR,
                message=f"process case setup failed: {type(error).__name__}",
                environment=environment_fingerprint(),
                **fields,
            )
            return self._finish(result, report_path)
        # The children's allow-listed variables (CUBLAS_WORKSPACE_CONFIG, ...) are what mattered.
        fields["environment"] = environment_fingerprint(variables=child_environment)
        root, managed = run_root(work_dir, self.temporary_root, "trainparity-process-")
        try:
            execution = _ResumeExecution(
                case_spec=case,
                case=loaded,
                policy=self.policy,
                command_dir=command_dir,
                run_root=root,
                environment=child_environment,
                timeout=self.timeout,
                preserved=not managed,
                parallel=wants_parallel(self.parallel, getattr(loaded, "device", "cpu")),
                progress=self.progress,
                staged_checkpoint_hook=staged_checkpoint_hook,
            )
            result = execution.run(fields, started)
        finally:
            if managed:
                shutil.rmtree(root, ignore_errors=True)
        return self._finish(result, report_path)

    def _policy_fields(self) -> dict[str, Any]:
        if isinstance(self.policy, ToleranceComparison):
            return {
                "comparison_policy": "explicit_tolerance",
                "comparison_rtol": self.policy.rtol,
                "comparison_atol": self.policy.atol,
                "comparison_equal_nan": self.policy.equal_nan,
            }
        return {"comparison_policy": "exact"}

    @staticmethod
    def _finish(result: ProcessResumeResult, report_path: Path | None) -> ProcessResumeResult:
        if report_path is not None:
            write_report(report_path, result.to_dict())
        return result


def _setup(
    spec: str, environment: Mapping[str, str] | None
) -> tuple[ProcessResumeCase, dict[str, str]]:
    """Load and validate the case and build the children's environment (CONTRACT §6.2, §6.5)."""
    case = load_process_case(spec)
    if not case.name:
        raise ValueError("case name must be non-empty")
    split, total = case.split_step, case.total_step
    for value in (split, total):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"split_step and total_step must be ints, got {value!r}")
    if not 0 < split < total:
        raise ValueError(f"need 0 < split_step < total_step, got {split} and {total}")
    child_environment = dict(os.environ)
    for key, value in dict(environment or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"environment keys and values must be str, got {key!r}: {value!r}")
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise ValueError(f"invalid environment variable name or value: {key!r}")
        child_environment[key] = value
    module_file = getattr(sys.modules.get(case_module_name(spec)), "__file__", None)
    if module_file:
        case_directory = str(Path(module_file).resolve().parent)
        existing = child_environment.get("PYTHONPATH")
        child_environment["PYTHONPATH"] = case_directory + (
            os.pathsep + existing if existing else ""
        )
    return case, child_environment


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


class _ResumeExecution:
    """One check's children, observations and decisions."""

    def __init__(
        self,
        *,
        case_spec: str,
        case: ProcessResumeCase,
        policy: ExactComparison | ToleranceComparison,
        command_dir: Path,
        run_root: Path,
        environment: dict[str, str],
        timeout: float,
        preserved: bool,
        parallel: bool,
        progress: ProgressReporter,
        staged_checkpoint_hook: Callable[[Path], None] | None,
    ) -> None:
        self.case_spec = case_spec
        self.case = case
        self.policy = policy
        self.command_dir = command_dir
        self.run_root = run_root
        self.environment = environment
        self.timeout = timeout
        self.preserved = preserved
        self.parallel = parallel
        self.progress = progress
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
            snapshot_dir=run_root / "snapshots",
            cwd=command_dir,
            environment=environment,
            timeout=timeout,
            progress=progress,
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
                if self.parallel:
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
        return _replace(result, timing_seconds=timing, processes=tuple(self._ordered_processes()))

    def _decide(self, fields: dict[str, Any]) -> ProcessResumeResult:
        snapshot_a = self._trained_and_observed("baseline_a")
        snapshot_b = self._trained_and_observed("baseline_b")
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
        if baseline_differences:
            return self._result(
                fields,
                Outcome.ABSTAIN,
                "baseline self-consistency failed; resume attribution is unsafe",
                first_divergent_step=total,
                primary_difference=baseline_differences[0],
                all_differences=baseline_differences,
                nondeterminism_hints=self._nondeterminism_hints(),
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
        began = time.perf_counter()
        differences = self.policy.compare_all(snapshot_a, snapshot_resume)
        # Sample order first: a resume that repeats or skips samples explains the states.
        differences = (*resume_coverage_differences(self.run_root), *differences)
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
        if differences:
            return self._result(
                fields,
                Outcome.FAIL,
                f"first observed divergence at step {total}: {differences[0].path}",
                first_divergent_step=total,
                primary_difference=differences[0],
                all_differences=differences,
                fresh_resume_processes_distinct=True,
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
        phase.run_dir = self.run_root / phase.name
        phase.run_dir.mkdir(parents=True, exist_ok=True)
        plan = ProcessExecutionPlan(
            phase=phase.name,
            cwd=self.command_dir,
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
        problem = self.parallel and multirank.concurrency_problem(
            phase.name, argv, self.environment
        )
        if problem:
            phase.error = _PhaseError(Outcome.ERROR, problem)
            return
        environment, phase.tag = multirank.phase_environment(argv, self.environment, phase.run_dir)
        try:
            spec = ChildSpec(
                name=phase.name,
                argv=argv,
                cwd=self.command_dir,
                env=environment,
                stdout_path=phase.run_dir / "stdout.log",
                stderr_path=phase.run_dir / "stderr.log",
            )
            self.group.start(spec, timeout=self.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError):
            phase.error = _PhaseError(
                Outcome.ERROR, self._hinted(phase.name, f"{phase.name} child launch failed")
            )

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        if name not in self.phases:
            return
        self.progress.event(name, kind, result.wall_seconds if result is not None else None)
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
        resume_dir = self.run_root / "candidate_resume"
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
        if not self.preserved:
            return message
        return f"{message}; see {phase}/stderr.log under the preserved work_dir"

    def _ordered_processes(self) -> list[ExternalProcessEvidence]:
        order = {name: index for index, name in enumerate(self.phases)}
        return sorted(self.processes, key=lambda evidence: order[evidence.phase])

    def _nondeterminism_hints(self) -> tuple[str, ...]:
        return tuple(
            hint
            for variable, hint in _NONDETERMINISM_VARIABLES.items()
            if variable not in self.environment
        )


def _validated_command(command: object) -> list[str]:
    if isinstance(command, (str, bytes)):
        raise TypeError(
            "command() must return a sequence of str such as [sys.executable, 'train.py'], not one string"
        )
    argv = list(command)  # type: ignore[call-overload]
    if not argv or not all(isinstance(item, str) and "\0" not in item for item in argv):
        raise TypeError("command() must return a non-empty sequence of str without NUL characters")
    return argv


def _replace(result: ProcessResumeResult, **changes: Any) -> ProcessResumeResult:
    import dataclasses

    return dataclasses.replace(result, **changes)
