"""One check_runs' children, observations and decisions: the execution behind check_runs.

Order of decisions: each variant's two runs, observed and compared with each
other (step by step when the runs record, then the final states; a variant
that disagrees with itself is ABSTAIN and nothing is said about the others);
then every other variant against the first (the reference), the same way:
the first variant that differs is the FAIL, at its first differing step and
path. Verdicts are decided in that order whatever order the children finish
in, so the comparison part of the report does not depend on scheduling.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    Difference,
    ExactComparison,
    ToleranceComparison,
)
from trainparity._internal.comparison.windows import ValueWindow, differences_with_windows
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.baseline_cache import baseline_cache_of, reuse_outcomes
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.processes.children import (
    PhaseChildren,
    PhaseError,
    TrainingPhase,
)
from trainparity._internal.processes.observer.client import ObservationFailure
from trainparity._internal.protocols import RunsCase
from trainparity._internal.recording.phase_recordings import (
    recording_directory,
    recording_environment,
)
from trainparity._internal.runs.comparisons import comparison_of, recorded, where
from trainparity._internal.runs.noise_decision import decide_noise
from trainparity._internal.runs.plan import REPEATS, RunVariant
from trainparity._internal.runs.recordings import RunsTrajectories
from trainparity._internal.runs.result import RunsResult, VariantComparison
from trainparity._internal.state.snapshot import Snapshot
from trainparity._internal.why.environment_leads import nondeterminism_hints
from trainparity._internal.why.knob_check import phase_fingerprints

__all__ = ["RunsExecution"]

# Where two runs part: (step, differences, final-state differences, value windows).
_Parting = tuple[int, tuple[Difference, ...], tuple[Difference, ...], tuple[ValueWindow, ...]]


class RunsExecution:
    """One check's children, observations and decisions."""

    def __init__(
        self,
        *,
        case_spec: str,
        case: RunsCase,
        variants: dict[str, RunVariant],
        policy: ExactComparison | ToleranceComparison | NoiseComparison,
        settings: RunSettings,
        noise_pair: tuple[str, str] | None = None,
        baseline_cache: Path | None = None,
    ) -> None:
        self.case = case
        self.noise_pair = noise_pair
        self.variants = variants
        self.policy = policy
        self.settings = settings
        root = settings.run_root
        self.timings: dict[str, float] = {}
        # The reference variant's runs are the baselines every other variant is judged against.
        reference = next(iter(variants))
        self.baseline_cache = (
            None
            if baseline_cache is None
            else baseline_cache_of(
                baseline_cache,
                settings,
                case_spec,
                {
                    f"{reference}_{repeat}": {
                        "end_step": case.total_step,
                        "world_size": None,
                        "layout": None,
                        "baselines": len(REPEATS),
                    }
                    for repeat in REPEATS
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
                    case.total_step,
                    root / name,
                    extra_args=variant.args,
                    extra_env={**variant.env, **recording_environment(root, name)},
                    emptied=(recording_directory(root, name),),
                )
                for name, variant in (
                    (f"{variant_name}_{repeat}", variant)
                    for variant_name, variant in variants.items()
                    for repeat in REPEATS
                )
            },
            timings=self.timings,
            case_kind="runs",
            baseline_cache=self.baseline_cache,
        )
        self.trajectories = RunsTrajectories(root, policy)  # type: ignore[arg-type]

    def run(self, fields: dict[str, Any], started: float) -> RunsResult:
        with self.children.running():
            try:
                if self.settings.parallel:
                    self.children.start_concurrently(self.children.phases)
                if isinstance(self.policy, NoiseComparison) and self.noise_pair is not None:
                    result = decide_noise(self, fields, self.policy, self.noise_pair)
                else:
                    result = self._decide(fields)
            except (PhaseError, ObservationFailure) as failure:
                result = self.result(fields, failure.outcome, failure.message)
        timing = dict(self.timings)
        timing["total_wall"] = time.perf_counter() - started
        run_walls = [timing[name] for name in self.children.phases if name in timing]
        if result.outcome in (Outcome.PASS, Outcome.FAIL) and run_walls:
            timing["longest_run"] = max(run_walls)
            if timing["longest_run"] > 0:
                timing["end_to_end_multiplier"] = timing["total_wall"] / timing["longest_run"]
        return dataclasses.replace(
            result,
            timing_seconds=timing,
            processes=self.children.ordered_processes(),
            baselines_reused=reuse_outcomes(self.baseline_cache),
        )

    # Decisions ------------------------------------------------------------------------

    def _decide(self, fields: dict[str, Any]) -> RunsResult:
        snapshots: dict[str, Snapshot] = {}
        comparisons: list[VariantComparison] = []
        for variant in self.variants:
            first = self.children.observed(f"{variant}_a")
            second = self.children.observed(f"{variant}_b")
            step, differences, final, windows = self._parted(
                variant, "a", variant, "b", first, second
            )
            comparisons.append(comparison_of(variant, variant, differences))
            if differences:
                return self.result(
                    fields,
                    Outcome.ABSTAIN,
                    f"variant {variant} is not self-consistent (its two runs differ at "
                    f"{where(step, differences)}); agreement between variants cannot be judged",
                    first_divergent_step=step,
                    divergent_variant=variant,
                    primary_difference=differences[0],
                    all_differences=differences,
                    value_windows=windows,
                    variant_comparisons=tuple(comparisons),
                    nondeterminism_hints=nondeterminism_hints(
                        self.settings.environment,
                        phase_fingerprints(
                            self.settings.run_root, (f"{variant}_a", f"{variant}_b")
                        ),
                        device=getattr(self.case, "device", None),
                    ),
                    **self.trajectories.report_fields(final),
                )
            snapshots[variant] = first
        reference, *others = self.variants
        failing: tuple[str, _Parting] | None = None
        for variant in others:
            parting = self._parted(
                reference, "a", variant, "a", snapshots[reference], snapshots[variant]
            )
            comparisons.append(comparison_of(variant, reference, parting[1]))
            if parting[1] and failing is None:
                failing = (variant, parting)
        if failing is not None:
            variant, (step, differences, final, windows) = failing
            return self.result(
                fields,
                Outcome.FAIL,
                f"variants {reference} and {variant} first differ at {where(step, differences)}",
                first_divergent_step=step,
                divergent_variant=variant,
                primary_difference=differences[0],
                all_differences=differences,
                value_windows=windows,
                variant_comparisons=tuple(comparisons),
                **self.trajectories.report_fields(final),
            )
        wording = (
            "exactly equal"
            if isinstance(self.policy, ExactComparison)
            else "equal under the declared tolerance"
        )
        return self.result(
            fields,
            Outcome.PASS,
            f"all {len(self.variants)} variants end {wording} at step {self.case.total_step}",
            variant_comparisons=tuple(comparisons),
            **self.trajectories.report_fields(()),
        )

    def _parted(
        self,
        baseline_variant: str,
        baseline_repeat: str,
        candidate_variant: str,
        candidate_repeat: str,
        baseline: Snapshot,
        candidate: Snapshot,
    ) -> _Parting:
        """(step, differences, final-state differences, value windows) where two runs first part.

        The recorded steps are compared first, so that a FAIL names the first
        step at which the runs part; without recordings (or with equal ones)
        the final states decide, at total_step. The windows hold the elements
        around each differing tensor's first differing element, which reports
        preview (comparison/windows.py).
        """
        baseline_run = f"{baseline_variant}_{baseline_repeat}"
        candidate_run = f"{candidate_variant}_{candidate_repeat}"
        key = (
            f"self_{baseline_variant}"
            if baseline_variant == candidate_variant
            else f"{baseline_variant}_vs_{candidate_variant}"
        )
        began = time.perf_counter()
        parted = recorded(lambda: self.trajectories.part(baseline_run, candidate_run))
        final, final_windows = differences_with_windows(self.policy, baseline, candidate)
        self.timings[f"comparison_{key}"] = time.perf_counter() - began
        if parted is not None:
            return parted.step, parted.differences, final, parted.comparison.value_windows
        return self.case.total_step, final, final, final_windows

    def result(
        self, fields: dict[str, Any], outcome: Outcome, message: str, **extra: Any
    ) -> RunsResult:
        return RunsResult(
            outcome=outcome,
            message=message,
            **self.children.evidence_fields(),
            **fields,
            **extra,
        )
