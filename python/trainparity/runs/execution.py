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
from collections.abc import Callable, Sequence
from typing import Any

from trainparity.comparison.noise import NoiseComparison
from trainparity.comparison.policies import Difference, ExactComparison, ToleranceComparison
from trainparity.outcomes import Outcome
from trainparity.processes.check_runner import RunSettings
from trainparity.processes.children import (
    PhaseChildren,
    PhaseError,
    TrainingPhase,
    nondeterminism_hints,
)
from trainparity.processes.observer.client import ObservationFailure
from trainparity.protocols import RunsCase
from trainparity.recording.envelope_steps import final_state_envelope
from trainparity.recording.phase_recordings import (
    TrajectoryError,
    recording_directory,
    recording_environment,
)
from trainparity.recording.runs import RunsTrajectories
from trainparity.recording.runs_envelope import RunsEnvelope
from trainparity.recording.trajectory import StepDivergence
from trainparity.runs.plan import REPEATS, RunVariant
from trainparity.runs.result import RunsResult, VariantComparison
from trainparity.state.snapshot import Snapshot

__all__ = ["RunsExecution"]


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
    ) -> None:
        self.case = case
        self.noise_pair = noise_pair
        self.variants = variants
        self.policy = policy
        self.settings = settings
        root = settings.run_root
        self.timings: dict[str, float] = {}
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
        )
        self.trajectories = RunsTrajectories(root, policy)  # type: ignore[arg-type]

    def run(self, fields: dict[str, Any], started: float) -> RunsResult:
        with self.children.running():
            try:
                if self.settings.parallel:
                    self.children.start_concurrently(self.children.phases)
                if isinstance(self.policy, NoiseComparison) and self.noise_pair is not None:
                    result = self._decide_noise(fields, self.policy, self.noise_pair)
                else:
                    result = self._decide(fields)
            except (PhaseError, ObservationFailure) as failure:
                result = self._result(fields, failure.outcome, failure.message)
        timing = dict(self.timings)
        timing["total_wall"] = time.perf_counter() - started
        run_walls = [timing[name] for name in self.children.phases if name in timing]
        if result.outcome in (Outcome.PASS, Outcome.FAIL) and run_walls:
            timing["longest_run"] = max(run_walls)
            if timing["longest_run"] > 0:
                timing["end_to_end_multiplier"] = timing["total_wall"] / timing["longest_run"]
        return dataclasses.replace(
            result, timing_seconds=timing, processes=self.children.ordered_processes()
        )

    # Decisions ------------------------------------------------------------------------

    def _decide(self, fields: dict[str, Any]) -> RunsResult:
        snapshots: dict[str, Snapshot] = {}
        comparisons: list[VariantComparison] = []
        for variant in self.variants:
            first = self.children.observed(f"{variant}_a")
            second = self.children.observed(f"{variant}_b")
            step, differences, final = self._parted(variant, "a", variant, "b", first, second)
            comparisons.append(_comparison(variant, variant, differences))
            if differences:
                return self._result(
                    fields,
                    Outcome.ABSTAIN,
                    f"variant {variant} is not self-consistent (its two runs differ at "
                    f"{_where(step, differences)}); agreement between variants cannot be judged",
                    first_divergent_step=step,
                    divergent_variant=variant,
                    primary_difference=differences[0],
                    all_differences=differences,
                    variant_comparisons=tuple(comparisons),
                    nondeterminism_hints=nondeterminism_hints(self.settings.environment),
                    **self.trajectories.report_fields(final),
                )
            snapshots[variant] = first
        reference, *others = self.variants
        failing: tuple[str, int, tuple[Difference, ...], tuple[Difference, ...]] | None = None
        for variant in others:
            step, differences, final = self._parted(
                reference, "a", variant, "a", snapshots[reference], snapshots[variant]
            )
            comparisons.append(_comparison(variant, reference, differences))
            if differences and failing is None:
                failing = (variant, step, differences, final)
        if failing is not None:
            variant, step, differences, final = failing
            return self._result(
                fields,
                Outcome.FAIL,
                f"variants {reference} and {variant} first differ at {_where(step, differences)}",
                first_divergent_step=step,
                divergent_variant=variant,
                primary_difference=differences[0],
                all_differences=differences,
                variant_comparisons=tuple(comparisons),
                **self.trajectories.report_fields(final),
            )
        wording = (
            "exactly equal"
            if isinstance(self.policy, ExactComparison)
            else "equal under the declared tolerance"
        )
        return self._result(
            fields,
            Outcome.PASS,
            f"all {len(self.variants)} variants end {wording} at step {self.case.total_step}",
            variant_comparisons=tuple(comparisons),
            **self.trajectories.report_fields(()),
        )

    def _decide_noise(
        self, fields: dict[str, Any], policy: NoiseComparison, pair: tuple[str, str]
    ) -> RunsResult:
        """Every variant outside the noise pair judged against the envelope of the pair's runs."""
        samples = list(
            dict.fromkeys(f"{variant}_{repeat}" for variant in pair for repeat in REPEATS)
        )
        finals = {name: self.children.observed(name) for name in self.children.phases}
        envelope = RunsEnvelope(self.settings.run_root, policy, samples)
        noise_text = " and ".join(dict.fromkeys(pair))
        comparisons: list[VariantComparison] = []
        reports: list[dict[str, Any]] = []
        failing: tuple[str, Any] | None = None
        began = time.perf_counter()
        for variant in self.variants:
            if variant in pair:
                continue
            runs = [f"{variant}_{repeat}" for repeat in REPEATS]
            event = _recorded(lambda runs=runs: envelope.judge(runs))  # type: ignore[misc]
            if not envelope.recorded:
                event, report = final_state_envelope(
                    policy,
                    [(name, finals[name]) for name in samples],
                    [(name, finals[name]) for name in runs],
                    self.case.total_step,
                )
                reports.append(report)
            if event is not None and event.kind != "candidate_left":
                self.timings["comparison"] = time.perf_counter() - began
                return self._result(
                    fields,
                    Outcome.ABSTAIN,
                    _noise_abstain_message(event, policy, noise_text),
                    first_divergent_step=event.step,
                    primary_difference=event.differences[0],
                    all_differences=event.differences,
                    variant_comparisons=tuple(comparisons),
                    nondeterminism_hints=nondeterminism_hints(self.settings.environment),
                    noise_envelope=self._noise_report(policy, envelope, reports, pair),
                    **(envelope.report_fields(()) if envelope.recorded else {}),
                )
            differences = event.differences if event is not None else ()
            comparisons.append(_comparison(variant, f"noise of {noise_text}", differences))
            if event is not None and failing is None:
                failing = (variant, event)
        self.timings["comparison"] = time.perf_counter() - began
        envelope_fields = {
            "noise_envelope": self._noise_report(policy, envelope, reports, pair),
            **(envelope.report_fields(()) if envelope.recorded else {}),
        }
        if failing is not None:
            variant, event = failing
            return self._result(
                fields,
                Outcome.FAIL,
                f"variant {variant} leaves the noise of {noise_text} at "
                f"{_where(event.step, event.differences)}{_exit_detail(event, policy)}",
                first_divergent_step=event.step,
                divergent_variant=variant,
                primary_difference=event.differences[0],
                all_differences=event.differences,
                variant_comparisons=tuple(comparisons),
                **envelope_fields,
            )
        closest = envelope_fields["noise_envelope"]["closest_approach"]
        approach = (
            "; they match the noise pair bit for bit"
            if closest is None
            else f"; closest approach: {closest['ratio']:.3g}× the noise at step "
            f"{closest['step']}, {closest['path']} ({closest['candidate']})"
        )
        judged = len(self.variants) - len(set(pair))
        return self._result(
            fields,
            Outcome.PASS,
            f"all {judged} variant{'s' if judged != 1 else ''} stay inside the noise of "
            f"{noise_text} up to step {self.case.total_step}{approach}",
            variant_comparisons=tuple(comparisons),
            **envelope_fields,
        )

    @staticmethod
    def _noise_report(
        policy: NoiseComparison,
        envelope: RunsEnvelope,
        reports: list[dict[str, Any]],
        pair: tuple[str, str],
    ) -> dict[str, Any]:
        if envelope.recorded:
            report = envelope.report()
        elif reports:
            report = dict(reports[0])
            report["steps"] = [row for found in reports for row in found["steps"]]
            approaches = [
                found["closest_approach"] for found in reports if found["closest_approach"]
            ]
            report["closest_approach"] = max(
                approaches, key=lambda item: item["ratio"], default=None
            )
        else:
            report = {"judged_on": "final states", "steps": [], "closest_approach": None}
        return {**policy.settings(), "noise_pair": list(pair), **report}

    def _parted(
        self,
        baseline_variant: str,
        baseline_repeat: str,
        candidate_variant: str,
        candidate_repeat: str,
        baseline: Snapshot,
        candidate: Snapshot,
    ) -> tuple[int, tuple[Difference, ...], tuple[Difference, ...]]:
        """(step, differences, final-state differences) where two runs first part.

        The recorded steps are compared first, so that a FAIL names the first
        step at which the runs part; without recordings (or with equal ones)
        the final states decide, at total_step.
        """
        baseline_run = f"{baseline_variant}_{baseline_repeat}"
        candidate_run = f"{candidate_variant}_{candidate_repeat}"
        key = (
            f"self_{baseline_variant}"
            if baseline_variant == candidate_variant
            else f"{baseline_variant}_vs_{candidate_variant}"
        )
        began = time.perf_counter()
        parted = _recorded(lambda: self.trajectories.part(baseline_run, candidate_run))
        final = tuple(self.policy.compare_all(baseline, candidate))
        self.timings[f"comparison_{key}"] = time.perf_counter() - began
        if parted is not None:
            return parted.step, parted.differences, final
        return self.case.total_step, final, final

    def _result(
        self, fields: dict[str, Any], outcome: Outcome, message: str, **extra: Any
    ) -> RunsResult:
        return RunsResult(
            outcome=outcome,
            message=message,
            **self.children.evidence_fields(),
            **fields,
            **extra,
        )


def _noise_abstain_message(event: Any, policy: NoiseComparison, noise_text: str) -> str:
    path = event.differences[0].path
    if event.kind == "too_noisy":
        return (
            f"the noise of {noise_text} at step {event.step} is {event.entry.noise:.3g} "
            f"(relative L2, at {event.entry.path}), above max_noise={policy.max_noise:.3g}: a "
            "difference smaller than that at that step cannot be seen"
        )
    return (
        f"the noise pair is not a measure of noise: {event.phase} differs from the other runs "
        f"of {noise_text} at step {event.step}: {path}, which NoiseComparison holds exact "
        "(not a floating-point value); agreement between variants cannot be judged"
    )


def _exit_detail(event: Any, policy: NoiseComparison) -> str:
    entry = event.entry
    if entry is None or entry.exact or entry.excursion is None:
        return ""
    ratio = entry.ratio if entry.ratio is not None else float("inf")
    return (
        f" (excursion {entry.excursion:.3g} is {ratio:.3g}× the noise {entry.noise:.3g}; "
        f"declared limit {policy.factor:g}×)"
    )


def _where(step: int, differences: Sequence[Difference]) -> str:
    return f"step {step}: {differences[0].path}"


def _recorded(part: Callable[[], StepDivergence | None]) -> StepDivergence | None:
    """One comparison of recordings; unusable recordings are the check's ERROR."""
    try:
        return part()
    except TrajectoryError as error:
        raise PhaseError(Outcome.ERROR, str(error)) from None


def _comparison(
    variant: str, reference: str, differences: Sequence[Difference]
) -> VariantComparison:
    first = differences[0] if differences else None
    return VariantComparison(
        variant=variant,
        reference=reference,
        outcome=Outcome.FAIL if differences else Outcome.PASS,
        difference_count=len(differences),
        first_path=first.path if first is not None else None,
        max_abs_error=max(
            (d.max_abs_error for d in differences if d.max_abs_error is not None), default=None
        ),
    )
