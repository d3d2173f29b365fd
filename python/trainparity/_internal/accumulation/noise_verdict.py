"""check_accumulation under NoiseComparison: the candidate's phases against the spread of repeated baselines.

The baselines repeat the full-batch execution (`baselines` of them), for a
GPU whose backward is nondeterministic, and one more sample, the split
reference, runs our loop over the candidate's microbatches: the same update
summed in another valid order, so the envelope holds the rounding a split
brings (which Adam's first step can turn into a full-size move of a
parameter whose gradient is rounding alone). The initial states, the step counts
of a case's own train_step and a multi-rank candidate's ranks stay exact, as
under the exact comparison; each observed phase (loss accounting, gradient,
optimizer state, parameter update, scheduler state) is then judged against
the envelope of the baselines' same phase, in contract order, each phase's
noise carried into the next (what a gradient's rounding moves, the update
inherits).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from trainparity._internal.accumulation.plan import PHASES
from trainparity._internal.accumulation.verdict import (
    Decision,
    compared_candidate,
    disagreement_before_phases,
    passed,
)
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.noise.envelope import (
    NoiseMemory,
    PathEnvelope,
    StepEnvelope,
    judge_step,
)
from trainparity._internal.noise.verdict import envelope_verdict
from trainparity._internal.noise.walk import EnvelopeEvent, StepRow, step_event
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.snapshot import Snapshot

__all__ = ["judge_noise_observations"]

Views = dict[str, Snapshot]


def judge_noise_observations(
    policy: NoiseComparison,
    baselines: Sequence[Views],
    candidate: Views,
    rank_views: Sequence[Views],
    *,
    own_step: bool,
    sample_names: Sequence[str] = (),
) -> Decision:
    """The first ABSTAIN, FAIL or ERROR (carrying `noise_envelope`); else PASS with the
    `noise_envelope` report and its closest approach.

    `baselines` are every noise sample's views, named by `sample_names`: the
    repeated full-batch baselines and the split reference (our loop over the
    candidate's microbatches), whose distance to the full batch is the
    rounding that splitting may bring.
    """
    exact = ExactComparison()  # the initial states and step counts the envelope does not cover
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        **policy.settings(),
        "judged_on": "phases of one optimizer-update boundary",
        "samples": list(sample_names)
        or [f"baseline_{chr(ord('a') + index)}" for index in range(len(baselines))],
        "steps": rows,
    }
    compared = compared_candidate(candidate, rank_views)
    if isinstance(compared, Decision):
        return compared
    candidate, compared_on = compared
    # Every baseline's initial state and step counts must agree exactly with baseline_a's:
    # the exact judgment of baseline_a, baseline_x and the candidate, for each other baseline.
    for other in baselines[1:]:
        disagreement = disagreement_before_phases(
            exact, baselines[0], other, candidate, rank_views, own_step=own_step
        )
        if disagreement is not None:
            return dataclasses.replace(
                disagreement,
                noise_envelope=_finished(report, rows),
                compared_on=compared_on if compared_on is not None else disagreement.compared_on,
            )
    noise_so_far = NoiseMemory()
    for index, phase in enumerate(PHASES, start=1):
        if phase not in candidate:  # an own step that did not report its losses
            continue
        judged = judge_step(
            policy, [view[phase] for view in baselines], candidate[phase], noise_so_far
        )
        rows.append(_row(index, phase, judged.paths))
        event = step_event(policy, judged, index, 0, report["samples"], ("candidate", False))
        if event is None:
            continue
        outcome, message = _verdict(event, policy, phase)
        return Decision(
            outcome,
            message,
            first_observed_phase=phase,
            verified_equal_initial_state=True,
            compared_on=compared_on,
            noise_envelope=_finished(report, rows),
            **_differences(event, judged),
        )
    return passed(compared_on=compared_on, noise_envelope=_finished(report, rows))


def _verdict(event: EnvelopeEvent, policy: NoiseComparison, phase: str) -> tuple[Outcome, str]:
    """The outcome and message of the event met in `phase`."""

    def samples_differ(event: EnvelopeEvent, path: str) -> str:
        return (
            f"baseline self-consistency failed in {phase}: {event.phase} differs from "
            f"baseline_a at {path}, which NoiseComparison holds exact"
        )

    def candidate_left(event: EnvelopeEvent, path: str, words: str | None) -> str:
        detail = "" if words is None else f" ({path} left the noise envelope: {words})"
        return f"first observed divergence in {phase}; not a root-cause claim{detail}"

    return envelope_verdict(
        event,
        policy,
        samples_differ=samples_differ,
        candidate_left=candidate_left,
        where=f"in {phase}",
    )


def _differences(event: EnvelopeEvent, judged: StepEnvelope) -> dict[str, Any]:
    """The verdict's differences: every baseline's that disagreed, or the candidate's."""
    if event.kind == "samples_differ":
        return {
            "primary_difference": event.differences[0],
            "all_differences": tuple(d for _, d in judged.sample_differences),
        }
    first = judged.differences[0] if judged.differences else None
    if event.kind == "too_noisy":
        return {"primary_difference": first}
    return {"primary_difference": first, "all_differences": judged.differences}


def _row(index: int, phase: str, paths: Sequence[PathEnvelope]) -> dict[str, Any]:
    folded = StepRow.of(index, 0, "candidate", paths)
    ratios = [entry for entry in paths if entry.ratio]
    worst = max(ratios, key=lambda entry: entry.ratio or 0.0) if ratios else None
    return {
        "step": index,
        "phase": phase,
        "rank": 0,
        "candidate": "candidate",
        "noise": dict(sorted(folded.noise.items())),
        "excursion": dict(sorted(folded.excursion.items())),
        "limit": dict(sorted(folded.limit.items())),
        "largest_ratio": None if worst is None else worst.to_dict(),
    }


def _finished(report: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    worst = max(
        (row for row in rows if row["largest_ratio"]),
        key=lambda row: row["largest_ratio"]["ratio"],
        default=None,
    )
    closest = None
    if worst is not None:
        entry = worst["largest_ratio"]
        closest = {
            "ratio": entry["ratio"],
            "step": worst["step"],
            "phase": worst["phase"],
            "path": entry["path"],
            "candidate": "candidate",
            "excursion": entry["excursion"],
            "noise": entry["noise"],
        }
    limits: dict[str, float] = {}
    for row in rows:
        for component, value in row["limit"].items():
            limits[component] = max(limits.get(component, 0.0), value)
    measured = [
        f"{name}.* by more than {value:.2g}" for name, value in sorted(limits.items()) if value > 0
    ]
    sensitivity = (
        f"a difference that changes {', or '.join(measured)} (relative L2) in a phase would "
        "have been seen; every other path was judged bit for bit"
        if measured
        else "every path was judged bit for bit (the baselines agreed): any change would have been seen"
    )
    return {**report, "steps": list(rows), "closest_approach": closest, "sensitivity": sensitivity}
