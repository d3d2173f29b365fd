"""check_runs under NoiseComparison: every variant outside the noise pair judged against its envelope.

The pair's runs (two repeats of one variant, or 1 against 2 threads) are
the samples; each other variant's two runs are candidates, step by step
when the runs record (runs/noise_recordings.py), else on their final
states. The first variant that leaves the envelope is the FAIL; a pair
that disagrees where it must not, or whose noise passes `max_noise`, is
ABSTAIN.
"""

from __future__ import annotations

import time
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.noise.verdict import envelope_verdict
from trainparity._internal.noise.walk import EnvelopeEvent, final_state_envelope
from trainparity._internal.outcomes import Outcome
from trainparity._internal.runs.comparisons import comparison_of, recorded, where
from trainparity._internal.runs.noise_recordings import RunsEnvelope
from trainparity._internal.runs.plan import REPEATS
from trainparity._internal.runs.result import RunsResult, VariantComparison
from trainparity._internal.why.environment_leads import nondeterminism_hints
from trainparity._internal.why.knob_check import phase_fingerprints

__all__ = ["decide_noise"]


def decide_noise(
    execution: Any,  # the RunsExecution that ran the phases (it imports this module)
    fields: dict[str, Any],
    policy: NoiseComparison,
    pair: tuple[str, str],
) -> RunsResult:
    """Every variant outside the noise pair judged against the envelope of the pair's runs."""
    samples = list(dict.fromkeys(f"{variant}_{repeat}" for variant in pair for repeat in REPEATS))
    finals = {name: execution.children.observed(name) for name in execution.children.phases}
    envelope = RunsEnvelope(execution.settings.run_root, policy, samples)
    noise_text = " and ".join(dict.fromkeys(pair))
    comparisons: list[VariantComparison] = []
    reports: list[dict[str, Any]] = []
    failing: tuple[str, Any] | None = None
    began = time.perf_counter()
    for variant in execution.variants:
        if variant in pair:
            continue
        runs = [f"{variant}_{repeat}" for repeat in REPEATS]
        event = recorded(lambda runs=runs: envelope.judge(runs))  # type: ignore[misc]
        if not envelope.recorded:
            event, report = final_state_envelope(
                policy,
                [(name, finals[name]) for name in samples],
                [(name, finals[name]) for name in runs],
                execution.case.total_step,
            )
            reports.append(report)
        if event is not None and event.kind != "candidate_left":
            execution.timings["comparison"] = time.perf_counter() - began
            return execution.result(
                fields,
                *_verdict(event, policy, noise_text, variant),
                first_divergent_step=event.step,
                primary_difference=event.differences[0],
                all_differences=event.differences,
                variant_comparisons=tuple(comparisons),
                nondeterminism_hints=nondeterminism_hints(
                    execution.settings.environment,
                    phase_fingerprints(execution.settings.run_root, [*samples, *runs]),
                    device=getattr(execution.case, "device", None),
                ),
                noise_envelope=_noise_report(policy, envelope, reports, pair),
                **(envelope.report_fields(()) if envelope.recorded else {}),
            )
        differences = event.differences if event is not None else ()
        comparisons.append(comparison_of(variant, f"noise of {noise_text}", differences))
        if event is not None and failing is None:
            failing = (variant, event)
    execution.timings["comparison"] = time.perf_counter() - began
    envelope_fields = {
        "noise_envelope": _noise_report(policy, envelope, reports, pair),
        **(envelope.report_fields(()) if envelope.recorded else {}),
    }
    if failing is not None:
        variant, event = failing
        return execution.result(
            fields,
            *_verdict(event, policy, noise_text, variant),
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
    judged = len(execution.variants) - len(set(pair))
    return execution.result(
        fields,
        Outcome.PASS,
        (
            f"all {judged} variants stay inside the noise of "
            if judged != 1
            else "the variant stays inside the noise of "
        )
        + f"{noise_text} up to step {execution.case.total_step}{approach}",
        variant_comparisons=tuple(comparisons),
        **envelope_fields,
    )


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
        approaches = [found["closest_approach"] for found in reports if found["closest_approach"]]
        report["closest_approach"] = max(approaches, key=lambda item: item["ratio"], default=None)
    else:
        report = {"judged_on": "final states", "steps": [], "closest_approach": None}
    return {**policy.settings(), "noise_pair": list(pair), **report}


def _verdict(
    event: EnvelopeEvent, policy: NoiseComparison, noise_text: str, variant: str
) -> tuple[Outcome, str]:
    """The outcome and message of `event`, met while judging `variant` against the noise pair."""

    def samples_differ(event: EnvelopeEvent, path: str) -> str:
        return (
            f"the noise pair is not a measure of noise: {event.phase} differs from the other "
            f"runs of {noise_text} at step {event.step}: {path}, which NoiseComparison holds "
            "exact (not a floating-point value); agreement between variants cannot be judged"
        )

    def candidate_left(event: EnvelopeEvent, path: str, words: str | None) -> str:
        return (
            f"variant {variant} leaves the noise of {noise_text} at "
            f"{where(event.step, event.differences)}" + ("" if words is None else f" ({words})")
        )

    return envelope_verdict(
        event, policy, samples_differ=samples_differ, candidate_left=candidate_left
    )
