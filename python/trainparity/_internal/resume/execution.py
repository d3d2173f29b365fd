"""One resume check's children, observations and decisions: the execution behind check_resume."""

from __future__ import annotations

import dataclasses
import math
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.cases.command_case import clear_checkpoint, resumes_by_itself
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    Difference,
    ExactComparison,
    ToleranceComparison,
)
from trainparity._internal.comparison.windows import ValueWindow, differences_with_windows
from trainparity._internal.distributed.phases import ids_path
from trainparity._internal.noise.walk import final_state_envelope
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.baseline_cache import baseline_cache_of, reuse_outcomes
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.processes.children import (
    PhaseChildren,
    PhaseError,
    TrainingPhase,
)
from trainparity._internal.processes.executor import replays
from trainparity._internal.processes.observer.client import ObservationFailure
from trainparity._internal.protocols import ProcessResumeCase
from trainparity._internal.resume.chain import CandidatePhase, chain_report, on_another_layout
from trainparity._internal.resume.noise_decision import (
    baseline_names,
    event_verdict,
    pass_message,
    split_differs_message,
    split_setting_message,
)
from trainparity._internal.resume.noise_recordings import ResumeEnvelope
from trainparity._internal.resume.recordings import (
    ResumeTrajectories,
    TrajectoryError,
    phase_recording_environment,
    recording_directory,
)
from trainparity._internal.resume.result import ProcessResumeResult
from trainparity._internal.resume.sample_order import (
    BoundaryDifference,
    resume_chain_differences,
)
from trainparity._internal.state.snapshot import Snapshot
from trainparity._internal.why.environment_leads import nondeterminism_hints
from trainparity._internal.why.knob_check import phase_fingerprints
from trainparity._internal.why.likely_cause import likely_cause, setting_cause

__all__ = ["CONCURRENT_CHILDREN", "ResumeExecution", "concurrent_children", "resume_phases"]

# What each phase's threads are shared over: baseline_a, baseline_b and candidate_split.
CONCURRENT_CHILDREN = 3
# Where each phase's wall time goes in the report's timing section.
_TIMING_KEYS = {
    "candidate_split": "candidate_save_exit",
    "candidate_resume": "candidate_new_process_load_resume",
}


def resume_phases(
    case: ProcessResumeCase,
    chain: Sequence[CandidatePhase],
    baselines: Sequence[str] = ("baseline_a", "baseline_b"),
) -> list[tuple[str, int, int | None, str | None]]:
    """Each phase of a resume check, in order: (name, the step it trains to, its rank count, layout).

    The baselines are the uninterrupted run at the rank count and layout that
    saved first (two, or NoiseComparison's `baselines`).
    """
    first = chain[0]
    return [
        *((name, case.total_step, first.world_size, first.layout) for name in baselines),
        *((phase.name, phase.end_step, phase.world_size, phase.layout) for phase in chain),
    ]


def concurrent_children(policy: object) -> int:
    """How many children a resume check starts at once: its baselines and candidate_split."""
    if isinstance(policy, NoiseComparison):
        return policy.baselines + 1
    return CONCURRENT_CHILDREN


class ResumeExecution:
    """One check's children, observations and decisions."""

    def __init__(
        self,
        *,
        case_spec: str,
        case: ProcessResumeCase,
        policy: ExactComparison | ToleranceComparison | NoiseComparison,
        settings: RunSettings,
        staged_checkpoint_hook: Callable[[Path], None] | None,
        chain: tuple[CandidatePhase, ...],
        baseline_cache: Path | None = None,
    ) -> None:
        self.case_spec = case_spec
        self.case = case
        self.policy = policy
        self.settings = settings
        self.staged_checkpoint_hook = staged_checkpoint_hook
        self.chain = chain
        root = settings.run_root
        self.baselines = baseline_names(
            policy.baselines if isinstance(policy, NoiseComparison) else 2
        )
        phases = resume_phases(case, chain, self.baselines)
        split_steps = [phase.from_step for phase in chain[1:]]
        self.timings: dict[str, float] = {}
        self.baseline_cache = (
            None
            if baseline_cache is None
            else baseline_cache_of(
                baseline_cache,
                settings,
                case_spec,
                {
                    name: {
                        "end_step": case.total_step,
                        "world_size": chain[0].world_size,
                        "layout": chain[0].layout,
                        "baselines": len(self.baselines),
                    }
                    for name in self.baselines
                },
            )
        )
        self.children = PhaseChildren(
            case_spec=case_spec,
            case=case,
            settings=settings,
            phases={
                name: TrainingPhase(
                    name,
                    end_step,
                    root / name,
                    world_size=world_size,
                    layout=layout,
                    extra_env=phase_recording_environment(root, name, split_steps),
                    emptied=(recording_directory(root, name),),
                )
                for name, end_step, world_size, layout in phases
            },
            timings=self.timings,
            timing_keys=_TIMING_KEYS,
            baseline_cache=self.baseline_cache,
        )

    # The decision sequence ----------------------------------------------------------

    def run(self, fields: dict[str, Any], started: float) -> ProcessResumeResult:
        with self.children.running():
            try:
                self._clear_checkpoints()
                if self.settings.parallel:
                    self.children.start_concurrently((*self.baselines, self.chain[0].name))
                if isinstance(self.policy, NoiseComparison):
                    result = self._decide_noise(fields, self.policy)
                else:
                    result = self._decide(fields)
            except (PhaseError, ObservationFailure) as failure:
                result = self._result(fields, failure.outcome, failure.message)
        timing = dict(self.timings)
        timing["total_wall"] = time.perf_counter() - started
        if result.outcome in (Outcome.PASS, Outcome.FAIL):
            timing["single_normal_run"] = timing["baseline_a"]
            if timing["single_normal_run"] > 0:
                timing["end_to_end_multiplier"] = timing["total_wall"] / timing["single_normal_run"]
        processes = self.children.ordered_processes()
        return dataclasses.replace(
            result,
            timing_seconds=timing,
            processes=processes,
            fresh_resume_processes_distinct=self._distinct_pids(processes),
            baselines_reused=reuse_outcomes(self.baseline_cache),
        )

    def _hints(self, *phases: str) -> tuple[str, ...]:
        """Why runs that should agree part, from the fingerprints `phases` recorded."""
        return nondeterminism_hints(
            self.settings.environment,
            phase_fingerprints(self.settings.run_root, phases),
            device=getattr(self.case, "device", None),
        )

    def _distinct_pids(self, processes: Sequence[Any]) -> bool | None:
        """Whether the candidate's phases ran as distinct processes; None until all of them ran.

        Decided from the evidence the report holds, so an ERROR before the resume
        (a baseline's observation failed) says nothing rather than a false "no".
        """
        pids = {process.phase: process.pid for process in processes}
        chain = [phase.name for phase in self.chain]
        if not all(name in pids for name in chain):
            return None
        return len({pids[name] for name in chain}) == len(chain)

    def _decide(self, fields: dict[str, Any]) -> ProcessResumeResult:
        snapshot_a = self.children.observed("baseline_a")
        snapshot_b = self.children.observed("baseline_b")
        trajectories = ResumeTrajectories(
            self.settings.run_root,
            self.policy,
            tuple(
                (phase.name, phase.from_step, on_another_layout(phase, self.chain[0]))
                for phase in self.chain
            ),
        )
        parted = _recorded(trajectories.baselines_part)
        began = time.perf_counter()
        baseline_differences, baseline_windows = differences_with_windows(
            self.policy, snapshot_a, snapshot_b
        )
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
        step, first_differences = _first_divergence(parted, total, (), baseline_differences)
        if first_differences:
            at_step = f" at step {step}" if parted is not None else ""
            return self._result(
                fields,
                Outcome.ABSTAIN,
                f"baseline self-consistency failed{at_step}; resume attribution is unsafe",
                first_divergent_step=step,
                primary_difference=first_differences[0],
                all_differences=first_differences,
                nondeterminism_hints=self._hints(*self.baselines),
                value_windows=_windows(parted, baseline_windows),
                # Two repeats that each hold a differing value constant were given it
                # differently (a setting from the clock or the PID), which is no noise.
                likely_cause=setting_cause(
                    first_differences,
                    trajectories.scalar_records("baseline_a"),
                    trajectories.scalar_records("baseline_b"),
                ),
                **trajectories.report_fields(baseline_differences),
            )
        snapshot_resume = self._run_chain()
        parted = _recorded(trajectories.candidates_part)
        began = time.perf_counter()
        final_differences, final_windows = differences_with_windows(
            self.policy, snapshot_a, snapshot_resume
        )
        root = self.settings.run_root
        # Every link of a chain; phases on another rank count switch to SameGlobalOrder.
        coverage = resume_chain_differences(
            ids_path(root / "baseline_a"),
            [(phase.name, ids_path(root / phase.name)) for phase in self.chain],
        )
        # Sample order first: a resume that repeats or skips samples explains the states.
        differences = (*(placed.difference for placed in coverage), *final_differences)
        self.timings["candidate_comparison"] = time.perf_counter() - began
        self.timings["comparison"] = (
            self.timings["baseline_comparison"] + self.timings["candidate_comparison"]
        )
        self.timings["candidate_save_exit_new_process_load_resume"] = sum(
            self.timings.get(key, 0.0)
            for key in (
                "candidate_save_exit",
                "checkpoint_staging",
                *(phase.name for phase in self.chain[1:-1]),
                "candidate_new_process_load_resume",
            )
        )
        recorded = trajectories.report_fields(differences)
        split = self.chain[0]
        if parted is not None and parted.candidate_phase == split.name:
            # Up to its save candidate_split is a third uninterrupted run: this is
            # nondeterminism, unless each run holds the differing value constant (a setting
            # computed from the phase's own end step, e.g. a scheduler's T_max).
            setting = setting_cause(
                parted.differences,
                trajectories.scalar_records("baseline_a"),
                trajectories.scalar_records(split.name),
            )
            if setting is None:
                message = split_differs_message(
                    split.name,
                    "baseline_a",
                    parted.step,
                    parted.differences[0].path,
                    split.end_step,
                )
            else:
                message = split_setting_message(
                    split.name, "baseline_a", parted.step, setting, split.end_step
                )
            return self._result(
                fields,
                Outcome.ABSTAIN,
                message,
                first_divergent_step=parted.step,
                primary_difference=parted.differences[0],
                all_differences=parted.differences,
                nondeterminism_hints=self._hints("baseline_a", split.name),
                value_windows=parted.comparison.value_windows,
                likely_cause=setting,
                **recorded,
            )
        step, first_differences = _first_divergence(parted, total, coverage, final_differences)
        if first_differences:
            return self._result(
                fields,
                Outcome.FAIL,
                f"first observed divergence at step {step}: {first_differences[0].path}",
                first_divergent_step=step,
                primary_difference=first_differences[0],
                all_differences=first_differences,
                value_windows=_windows(parted, final_windows),
                likely_cause=likely_cause(
                    first_differences,
                    snapshot_a.state,
                    trajectories.scalar_records("baseline_a"),
                ),
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
            **recorded,
        )

    def _run_chain(self) -> Snapshot:
        """Run every candidate phase, each resume loading the checkpoint the phase before it saved
        in a fresh process; the final resumed state."""
        checkpoint = self.children.trained(self.chain[0].name)
        for phase in self.chain[1:]:
            staged = self._stage(checkpoint, phase.name)
            # A job that resumes by itself is told nothing: it finds the staged checkpoint.
            resumed = None if resumes_by_itself(self.case) else staged
            self.children.phases[phase.name].resume_from = resumed
            checkpoint = self.children.trained(phase.name)
        pids = [self.children.phases[phase.name].result.pid for phase in self.chain]
        if len(set(pids)) != len(pids):
            raise PhaseError(
                Outcome.ERROR, "save/exit and load/resume did not prove distinct process IDs"
            )
        return self.children.observed("candidate_resume", checkpoint)

    def _decide_noise(self, fields: dict[str, Any], policy: NoiseComparison) -> ProcessResumeResult:
        """The decision sequence under NoiseComparison (resume/noise_decision.py words it)."""
        finals = [(name, self.children.observed(name)) for name in self.baselines]
        self.timings["baseline_self_consistency"] = sum(
            self.timings.get(key, 0.0)
            for name in self.baselines
            for key in (name, f"snapshot_{name}")
        )
        envelope = ResumeEnvelope(
            self.settings.run_root,
            policy,
            self.baselines,
            tuple(
                (phase.name, phase.from_step, on_another_layout(phase, self.chain[0]))
                for phase in self.chain
            ),
        )
        snapshot_resume = self._run_chain()
        began = time.perf_counter()
        event = _recorded(envelope.judge)
        if envelope.recorded:
            report = envelope.report()
            if event is None:
                # The saved checkpoint is judged too: a fault can show there alone (a stale
                # last.ckpt, a counter kept outside what record() sees), as the exact check sees.
                event, final = final_state_envelope(
                    policy,
                    finals,
                    [("candidate_resume", snapshot_resume)],
                    self.case.total_step,
                    envelope.final_state_memory(),
                )
                report["final_state"] = {
                    key: final[key] for key in ("steps", "closest_approach", "sensitivity")
                }
        else:
            event, report = final_state_envelope(
                policy, finals, [("candidate_resume", snapshot_resume)], self.case.total_step
            )
        root = self.settings.run_root
        coverage = resume_chain_differences(
            ids_path(root / self.baselines[0]),
            [(phase.name, ids_path(root / phase.name)) for phase in self.chain],
        )
        self.timings["comparison"] = time.perf_counter() - began
        envelope_fields = {"noise_envelope": {**policy.settings(), **report}}
        recorded = envelope.report_fields(()) if envelope.recorded else {}
        split = self.chain[0]
        placed = sorted(coverage, key=lambda item: math.inf if item.step is None else item.step)
        if (
            placed
            and (event is None or event.kind == "candidate_left")
            and (event is None or placed[0].step is None or placed[0].step <= event.step)
        ):
            step = placed[0].step if placed[0].step is not None else self.case.total_step
            ordered = tuple(item.difference for item in placed)
            return self._result(
                fields,
                Outcome.FAIL,
                f"first observed divergence at step {step}: {ordered[0].path}",
                first_divergent_step=step,
                primary_difference=ordered[0],
                all_differences=ordered,
                **envelope_fields,
                **recorded,
            )
        if event is not None:
            outcome, message = event_verdict(
                event, policy, self.baselines[0], split.name, split.end_step
            )
            extra: dict[str, Any] = {}
            if outcome is Outcome.ABSTAIN:
                extra["nondeterminism_hints"] = self._hints(*self.baselines)
            return self._result(
                fields,
                outcome,
                message,
                first_divergent_step=event.step,
                primary_difference=event.differences[0],
                all_differences=event.differences,
                **extra,
                **envelope_fields,
                **recorded,
            )
        return self._result(
            fields,
            Outcome.PASS,
            pass_message(report["closest_approach"], report["judged_on"]),
            **envelope_fields,
            **recorded,
        )

    def _result(
        self, fields: dict[str, Any], outcome: Outcome, message: str, **extra: Any
    ) -> ProcessResumeResult:
        return ProcessResumeResult(
            outcome=outcome,
            message=message,
            resume_chain=chain_report(self.chain),
            **self.children.evidence_fields(),
            **fields,
            **extra,
        )

    # Phases ---------------------------------------------------------------------------

    def _clear_checkpoints(self) -> None:
        """Before any phase starts: nothing at the checkpoint path of a job that resumes by
        itself, which would resume from a kept work_dir's last check instead of step 0 (or,
        resumed, instead of the staged checkpoint)."""
        if not resumes_by_itself(self.case):
            return
        for phase in self.children.phases.values():
            if replays(self.children.launcher, phase.name):
                continue  # it ran elsewhere: its checkpoint is the evidence
            try:
                clear_checkpoint(self.case, phase.run_dir)
            except OSError as error:
                raise PhaseError(
                    Outcome.ERROR,
                    f"{phase.name}: cannot remove the last check's checkpoint from its run "
                    f"directory {self.children.shown(phase.run_dir)}: {error}",
                ) from None

    def _stage(self, split_checkpoint: Path, phase: str) -> Path:
        """Copy a saved checkpoint to where the resuming phase's location contract says it lives."""
        began = time.perf_counter()
        resume_dir = self.settings.run_root / phase
        resume_dir.mkdir(parents=True, exist_ok=True)
        staged = self.children.checkpoint_path(phase, resume_dir, "before child launch")
        if replays(self.children.launcher, phase):
            return staged  # it ran elsewhere, from a plan that staged it (trainparity judge)
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
            raise PhaseError(
                Outcome.ERROR, f"{phase} checkpoint staging failed: {type(error).__name__}"
            ) from None
        elapsed = time.perf_counter() - began
        self.timings["checkpoint_staging"] = self.timings.get("checkpoint_staging", 0.0) + elapsed
        return staged


def _first_divergence(
    parted: Any,
    total_step: int,
    coverage: Sequence[BoundaryDifference],
    final_differences: tuple[Difference, ...],
) -> tuple[int, tuple[Difference, ...]]:
    """(step, differences) of the first divergence: a recorded step's, else the final state's.

    Sample-order differences come with the step of their position when the
    script calls record() too: the earliest leads when it is at or before the
    first differing record, and follows the record's differences otherwise.
    Without differing records they lead, at their step (else the last step).
    """
    placed = sorted(coverage, key=lambda item: math.inf if item.step is None else item.step)
    leading = placed[0].step if placed else None
    ordered = tuple(item.difference for item in placed)
    if parted is None:
        return total_step if leading is None else leading, (*ordered, *final_differences)
    if leading is not None and leading <= parted.step:
        return leading, (*ordered, *parted.differences)
    return parted.step, (*parted.differences, *ordered)


def _windows(parted: Any, final_windows: tuple[ValueWindow, ...]) -> tuple[ValueWindow, ...]:
    """The value windows of the step the verdict names: a recorded step's, else the final state's."""
    return final_windows if parted is None else parted.comparison.value_windows


def _recorded(part: Callable[[], Any]) -> Any:
    """One step of the trajectory comparison; unusable recordings are the check's ERROR."""
    try:
        return part()
    except TrajectoryError as error:
        raise PhaseError(Outcome.ERROR, str(error)) from None
