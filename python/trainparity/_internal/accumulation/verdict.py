"""The verdict of one accumulation check from what its children observed, in contract order.

The initial states first (ABSTAIN unless verified equal), then, for a case's
own train_step, its optimizer and scheduler step counts, then a multi-rank
candidate's ranks against each other, then the phases in contract order: the baselines against
each other (ABSTAIN) and the candidate (rank 0) against the reference (FAIL). A candidate
whose ranks hold shards (FSDP2) is judged on its global state instead of rank 0's
(accumulation/sharded.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainparity._internal.accumulation.plan import INITIAL_KEY, PHASES
from trainparity._internal.accumulation.rank_orchestration import rank_differences
from trainparity._internal.accumulation.sharded import (
    SHARDED_COMPARISON,
    ReassemblyError,
    global_views,
    holds_shards,
)
from trainparity._internal.comparison.policies import (
    Difference,
    ExactComparison,
    ToleranceComparison,
)
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.freeze import FrozenMapping
from trainparity._internal.state.snapshot import Snapshot

__all__ = ["Verdict", "judge_before_phases", "judge_observations"]

INITIAL_STATE = "initial_state"
OPTIMIZER_PHASE = "optimizer_state"
SCHEDULER_PHASE = "scheduler_state"

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
) -> str | None:
    """Raise the first ABSTAIN or FAIL Verdict; when all observations agree, return how the
    candidate was compared (the report's `compared_on`; None: as observed, rank 0 for ranks).

    `views` are baseline_a's, baseline_b's and the candidate's (rank 0's)
    phase snapshots; `rank_views` every rank's, for a multi-rank candidate.
    """
    baseline_a, baseline_b, candidate = views
    compared_on = None
    if any(holds_shards(snapshot.state) for view in rank_views for snapshot in view.values()):
        try:
            candidate = global_views(rank_views)
        except ReassemblyError as error:
            raise Verdict(
                Outcome.ERROR, f"the candidate's shards could not be reassembled: {error}"
            ) from None
        compared_on = SHARDED_COMPARISON
    try:
        _judge(policy, baseline_a, baseline_b, candidate, rank_views, own_step=own_step)
    except Verdict as verdict:
        if compared_on is not None:
            verdict.fields["compared_on"] = compared_on
        raise
    return compared_on


def _judge(
    policy: ExactComparison | ToleranceComparison,
    baseline_a: Views,
    baseline_b: Views,
    candidate: Views,
    rank_views: Sequence[Views],
    *,
    own_step: bool,
) -> None:
    judge_before_phases(policy, baseline_a, baseline_b, candidate, rank_views, own_step=own_step)
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
            raise Verdict(
                Outcome.FAIL,
                f"first observed divergence in {phase}; not a root-cause claim",
                **_differences(phase, differences, verified=True),
            )


def judge_before_phases(
    policy: Any,
    baseline_a: Views,
    baseline_b: Views,
    candidate: Views,
    rank_views: Sequence[Views],
    *,
    own_step: bool,
) -> None:
    """The judgments before the phases: initial states, an own step's step counts, the ranks.

    Exact under every policy that reaches them this way; NoiseComparison
    (accumulation/noise_verdict.py) passes ExactComparison for each baseline.
    """
    _judge_initial(policy, baseline_a[INITIAL_KEY], baseline_b[INITIAL_KEY], candidate)
    if own_step:
        for phase, component in ((OPTIMIZER_PHASE, "optimizer"), (SCHEDULER_PHASE, "scheduler")):
            _judge_step_count(
                policy, phase, component, baseline_a, baseline_b, rank_views or [candidate]
            )
    disagreement = rank_differences(policy, rank_views) if rank_views else None
    if disagreement is not None:
        message, differences = disagreement
        raise Verdict(Outcome.FAIL, message, **_differences("ranks", differences, verified=True))


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


def _judge_step_count(
    policy: ExactComparison | ToleranceComparison,
    phase: str,
    component: str,
    baseline_a: Views,
    baseline_b: Views,
    candidates: Sequence[Views],
) -> None:
    """FAIL at `<component>.step_calls` when a train_step did not step it as the reference did.

    Decisive before every phase, the ranks' agreement included. The count is
    a fact about the user's loop, and what it changes elsewhere is its
    symptom: the gradient phase is observed at the first `optimizer.step`
    and the optimizer phase at the last, so with four optimizer steps (or
    none) in one update those observations belong to another loop; a
    scheduler stepped per microbatch first shows as the decayed learning
    rate the optimizer stepped with. The optimizer's count is judged before
    the scheduler's. Only once the baselines agree on their own count;
    otherwise the phases decide (ABSTAIN there).
    """
    reference = _step_calls(baseline_a, phase, component)
    if reference is None or _step_calls(baseline_b, phase, component) != reference:
        return
    for rank, view in enumerate(candidates):
        counted = _step_calls(view, phase, component)
        if counted is None or counted == reference:
            continue
        count_difference = policy.compare_all(
            _count_tree(component, reference), _count_tree(component, counted)
        )
        rest = tuple(
            difference
            for difference in policy.compare_all(baseline_a[phase], view[phase])
            if difference.path != count_difference[0].path
        )
        who = f"rank {rank}'s train_step" if len(candidates) > 1 else "train_step"
        raise Verdict(
            Outcome.FAIL,
            f"first observed divergence in {phase}: {who} called {component}.step "
            f"{counted} times in one update (the reference: {reference}); not a root-cause claim",
            **_differences(phase, (*count_difference, *rest), verified=True),
        )


def _step_calls(view: Views, phase: str, component: str) -> int | None:
    """The counted `<component>.step` calls of one child, None where they were not counted."""
    if phase not in view:
        return None
    observed = view[phase].state.as_dict().get(component)
    calls = observed.as_dict().get("step_calls") if isinstance(observed, FrozenMapping) else None
    return calls if isinstance(calls, int) and not isinstance(calls, bool) else None


def _count_tree(component: str, calls: int) -> FrozenMapping:
    # The count where its phase holds it, so its Difference reads as the phase's would.
    return FrozenMapping(((component, FrozenMapping((("step_calls", calls),))),))


def _differences(
    phase: str, differences: tuple[Difference, ...], *, verified: bool
) -> dict[str, Any]:
    return {
        "first_observed_phase": phase,
        "primary_difference": differences[0],
        "all_differences": differences,
        "verified_equal_initial_state": verified,
    }
