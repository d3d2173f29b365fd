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
inherits). `loss_accounting` is judged against the full-batch baselines
alone, with the rounding of a reassociated sum as its floor: a split
changes only the order its losses are added in, and the split reference is
admitted for the later phases only when its own losses pass that test.
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

SPLIT = "split_reference"  # execution.py names the child so
ACCOUNTING = "loss_accounting"
LOSS_SUM_ROUNDING = 2.0**-17  # 64 float32 rounding units, relative: a reassociated sum's slack

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
    names = list(report["samples"])
    full_batch = [view for name, view in zip(names, baselines, strict=True) if name != SPLIT]
    full_names = [name for name in names if name != SPLIT]
    split = next((view for name, view in zip(names, baselines, strict=True) if name == SPLIT), None)
    accounting = _accounting_policy(policy)
    noise_so_far = NoiseMemory()
    rejected: StepEnvelope | None = None  # the split reference's losses, when they do not add up
    for index, phase in enumerate(PHASES, start=1):
        if phase == ACCOUNTING and split is not None:
            # The split reference is admitted as a sample of the update only when its own
            # losses add up to the full batch's: a loss() whose declared numerator does not
            # add over microbatches would otherwise carry its error into the envelope.
            admitted = judge_step(accounting, [view[phase] for view in full_batch], split[phase])
            if step_event(accounting, admitted, index, 0, full_names, (SPLIT, False)):
                split, rejected = None, admitted
        if phase in candidate:  # not when an own step did not report its losses
            if phase == ACCOUNTING:  # against the full batch: a split only reassociates sums
                phase_policy, samples, sample_names = accounting, full_batch, full_names
            else:
                phase_policy = policy
                samples = [*full_batch, *([split] if split is not None else [])]
                sample_names = [*full_names, *([SPLIT] if split is not None else [])]
            judged = judge_step(
                phase_policy, [view[phase] for view in samples], candidate[phase], noise_so_far
            )
            rows.append(_row(index, phase, judged.paths))
            event = step_event(phase_policy, judged, index, 0, sample_names, ("candidate", False))
            if event is not None:
                outcome, message = _verdict(event, phase_policy, phase)
                return Decision(
                    outcome,
                    message,
                    first_observed_phase=phase,
                    verified_equal_initial_state=True,
                    compared_on=compared_on,
                    noise_envelope=_finished(report, rows),
                    **_differences(event, judged),
                )
        if rejected is not None:
            return _split_not_admitted(rejected, _finished(report, rows), compared_on)
    return passed(compared_on=compared_on, noise_envelope=_finished(report, rows))


def _accounting_policy(policy: NoiseComparison) -> NoiseComparison:
    """The policy `loss_accounting` is judged by: the declared one, plus the rounding of sums.

    A split adds the microbatches' losses in another order; that moves a sum
    of positive terms by a few units of its last place, never by a factor.
    """
    return NoiseComparison(
        factor=policy.factor,
        baselines=policy.baselines,
        floor_rtol=policy.floor_rtol + LOSS_SUM_ROUNDING,
        floor_atol=policy.floor_atol,
        max_noise=policy.max_noise,
    )


def _split_not_admitted(
    judged: StepEnvelope, envelope: dict[str, Any], compared_on: str | None
) -> Decision:
    """ABSTAIN: the split reference's losses do not add up to the full batch's."""
    first = judged.differences[0] if judged.differences else None
    where = f" at {first.path}" if first is not None else ""
    return Decision(
        Outcome.ABSTAIN,
        f"{SPLIT}'s loss_accounting differs from the full batch's{where}: the numerator and "
        "denominator loss() declares do not add up over microbatches, so the split "
        "reference cannot be trusted to differ from the full batch by rounding alone; "
        "declare them as sums over each microbatch's samples (or tokens)",
        first_observed_phase=ACCOUNTING,
        primary_difference=first,
        all_differences=judged.differences,
        verified_equal_initial_state=True,
        compared_on=compared_on,
        noise_envelope=envelope,
    )


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
