"""The verdict of one accumulation check from what its children observed, in contract order.

The initial states first (ABSTAIN unless verified equal), then, for a case's
own train_step, its optimizer step count, then a multi-rank candidate's ranks
against each other, then the phases in contract order: the baselines against
each other (ABSTAIN) and the candidate (rank 0) against the reference (FAIL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainparity.accumulation_plan import INITIAL_KEY, PHASES
from trainparity.accumulation_ranks import rank_differences
from trainparity.comparison import Difference, ExactComparison, ToleranceComparison
from trainparity.outcomes import Outcome
from trainparity.snapshot import Snapshot
from trainparity.state import FrozenMapping

__all__ = ["Verdict", "judge_observations"]

INITIAL_STATE = "initial_state"
OPTIMIZER_PHASE = "optimizer_state"
SCHEDULER_PHASE = "scheduler_state"
SCHEDULER_STEP_CALLS = "scheduler.step_calls"

Views = Mapping[str, Snapshot]


class Verdict(Exception):
    """Ends the decision sequence with a verdict (fields of AccumulationResult)."""

    def __init__(self, outcome: Outcome, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = {"outcome": outcome, "message": message, **fields}


def judge_observations(
    policy: ExactComparison | ToleranceComparison,
    views: Sequence[Views],
    rank_views: Sequence[Views],
    *,
    own_step: bool,
) -> None:
    """Raise the first ABSTAIN or FAIL Verdict; return when all observations agree.

    `views` are baseline_a's, baseline_b's and the candidate's (rank 0's)
    phase snapshots; `rank_views` every rank's, for a multi-rank candidate.
    """
    baseline_a, baseline_b, candidate = views
    _judge_initial(policy, baseline_a[INITIAL_KEY], baseline_b[INITIAL_KEY], candidate)
    if own_step:
        _judge_optimizer_steps(policy, baseline_a, baseline_b, rank_views or [candidate])
    disagreement = rank_differences(policy, rank_views) if rank_views else None
    if disagreement is not None:
        message, differences = disagreement
        raise Verdict(Outcome.FAIL, message, **_differences("ranks", differences, verified=True))
    for phase in PHASES:
        if phase not in candidate:  # an own step that did not report its losses
            continue
        differences = policy.compare_all(baseline_a[phase], baseline_b[phase])
        if differences:
            raise Verdict(
                Outcome.ABSTAIN,
                "baseline self-consistency failed",
                **_differences(phase, differences, verified=True),
            )
        differences = policy.compare_all(baseline_a[phase], candidate[phase])
        if differences:
            if own_step and phase == SCHEDULER_PHASE:
                # The count explains the other scheduler fields (last_epoch, _last_lr, ...).
                # It does not preempt earlier phases: none is observed at a scheduler.step,
                # so a divergence there (the lr a scheduler stepped too early gave the
                # optimizer) is genuinely observed first.
                differences = _first_at(differences, SCHEDULER_STEP_CALLS)
            raise Verdict(
                Outcome.FAIL,
                f"first observed divergence in {phase}; not a root-cause claim",
                **_differences(phase, differences, verified=True),
            )


def _judge_initial(
    policy: ExactComparison | ToleranceComparison,
    baseline_a: Snapshot,
    baseline_b: Snapshot,
    candidate: Views,
) -> None:
    for other, message in (
        (baseline_b, "baseline initial-state self-consistency failed"),
        (candidate[INITIAL_KEY], "candidate did not start from verified-equal initial state"),
    ):
        differences = policy.compare_all(baseline_a, other)
        if differences:
            raise Verdict(
                Outcome.ABSTAIN,
                message,
                **_differences(INITIAL_STATE, differences, verified=False),
            )


def _judge_optimizer_steps(
    policy: ExactComparison | ToleranceComparison,
    baseline_a: Views,
    baseline_b: Views,
    candidates: Sequence[Views],
) -> None:
    """FAIL at `optimizer.step_calls` when a train_step did not step the optimizer as the reference did.

    Decisive before every phase, the ranks' agreement included: the gradient
    phase is observed at the first `optimizer.step` and the optimizer phase
    at the last, so with four steps (or none) in one update those
    observations belong to another loop (the first of four steps saw a
    quarter of the window's gradients) and comparing them would name a
    symptom of the count, not the count. Only once the baselines agree on
    their own count; otherwise the phases decide (ABSTAIN there).
    """
    reference = _optimizer_step_calls(baseline_a)
    if reference is None or _optimizer_step_calls(baseline_b) != reference:
        return
    for rank, view in enumerate(candidates):
        counted = _optimizer_step_calls(view)
        if counted is None or counted == reference:
            continue
        count_difference = policy.compare_all(_count_tree(reference), _count_tree(counted))
        rest = tuple(
            difference
            for difference in policy.compare_all(baseline_a[OPTIMIZER_PHASE], view[OPTIMIZER_PHASE])
            if difference.path != count_difference[0].path
        )
        who = f"rank {rank}'s train_step" if len(candidates) > 1 else "train_step"
        raise Verdict(
            Outcome.FAIL,
            f"first observed divergence in {OPTIMIZER_PHASE}: {who} called optimizer.step "
            f"{counted} times in one update (the reference: {reference}); not a root-cause claim",
            **_differences(OPTIMIZER_PHASE, (*count_difference, *rest), verified=True),
        )


def _optimizer_step_calls(view: Views) -> int | None:
    """The counted `optimizer.step` calls of one child, None where they were not counted."""
    optimizer = view[OPTIMIZER_PHASE].state.as_dict().get("optimizer")
    calls = optimizer.as_dict().get("step_calls") if isinstance(optimizer, FrozenMapping) else None
    return calls if isinstance(calls, int) and not isinstance(calls, bool) else None


def _count_tree(calls: int) -> FrozenMapping:
    # The count where the optimizer phase holds it, so its Difference reads as the phase's would.
    return FrozenMapping((("optimizer", FrozenMapping((("step_calls", calls),))),))


def _first_at(differences: tuple[Difference, ...], path: str) -> tuple[Difference, ...]:
    """`differences` with the one at `path` (if any) first; the others keep their order."""
    return (
        *(difference for difference in differences if difference.path == path),
        *(difference for difference in differences if difference.path != path),
    )


def _differences(
    phase: str, differences: tuple[Difference, ...], *, verified: bool
) -> dict[str, Any]:
    return {
        "first_observed_phase": phase,
        "primary_difference": differences[0],
        "all_differences": differences,
        "verified_equal_initial_state": verified,
    }
