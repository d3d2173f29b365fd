"""The verdict of one accumulation check from what its children observed, in contract order.

The initial states first (ABSTAIN unless verified equal), then, for a case's
own train_step, its optimizer and scheduler step counts, then a multi-rank
candidate's ranks against each other, then the phases in contract order: the baselines against
each other (ABSTAIN) and the candidate (rank 0) against the reference (FAIL). A candidate
whose ranks hold shards (FSDP2) is judged on its global state instead of rank 0's
(accumulation/sharded.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainparity._internal.accumulation.plan import INITIAL_KEY, PHASES
from trainparity._internal.accumulation.rank_orchestration import rank_differences
from trainparity._internal.accumulation.result import AccumulationResult
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
from trainparity._internal.comparison.windows import ValueWindow, differences_with_windows
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.freeze import FrozenMapping
from trainparity._internal.state.snapshot import Snapshot

__all__ = [
    "Decision",
    "compared_candidate",
    "disagreement_before_phases",
    "judge_observations",
    "passed",
]

INITIAL_STATE = "initial_state"
OPTIMIZER_PHASE = "optimizer_state"
SCHEDULER_PHASE = "scheduler_state"
PASS_MESSAGE = "declared executions are equivalent for one optimizer-update boundary"

Views = Mapping[str, Snapshot]


@dataclass(frozen=True)
class Decision:
    """What one accumulation check concluded: the verdict fields of its AccumulationResult.

    Returned along the decision sequence, not raised; `result()` completes it.
    """

    outcome: Outcome
    message: str
    first_observed_phase: str | None = None
    primary_difference: Difference | None = None
    all_differences: tuple[Difference, ...] = ()
    verified_equal_initial_state: bool = False
    compared_on: str | None = None
    noise_envelope: dict[str, Any] | None = None
    process_ids: tuple[int, ...] = ()
    loss_normalization_captured: bool = False
    value_windows: tuple[ValueWindow, ...] = ()

    def as_fields(self) -> dict[str, Any]:
        """Each field by name (the values themselves, not copies as dataclasses.asdict makes)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def result(self, **context: Any) -> AccumulationResult:
        """The check's result: this decision and what the check knows besides (its case, ...)."""
        return AccumulationResult(**self.as_fields(), **context)


def passed(
    *, compared_on: str | None = None, noise_envelope: dict[str, Any] | None = None
) -> Decision:
    """PASS: every observation agreed (under NoiseComparison, with its closest approach)."""
    message = PASS_MESSAGE
    closest = (noise_envelope or {}).get("closest_approach")
    if closest is not None:
        message += (
            f"; inside the noise envelope, closest approach {closest['ratio']:.3g}× the "
            f"noise in {closest['phase']}, {closest['path']}"
        )
    return Decision(
        Outcome.PASS,
        message,
        verified_equal_initial_state=True,
        compared_on=compared_on,
        noise_envelope=noise_envelope,
    )


def compared_candidate(
    candidate: Views, rank_views: Sequence[Views]
) -> tuple[Views, str | None] | Decision:
    """The candidate as compared, and how (`compared_on`): its ranks' shards reassembled into
    global tensors where they hold shards, else rank 0's views as observed (None). An ERROR
    Decision when the shards cannot be reassembled."""
    if not any(holds_shards(snapshot.state) for view in rank_views for snapshot in view.values()):
        return candidate, None
    try:
        return global_views(rank_views), SHARDED_COMPARISON
    except ReassemblyError as error:
        return Decision(Outcome.ERROR, f"the candidate's shards could not be reassembled: {error}")


def judge_observations(
    policy: ExactComparison | ToleranceComparison,
    views: Sequence[Views],
    rank_views: Sequence[Views],
    *,
    own_step: bool,
) -> Decision:
    """The first ABSTAIN, FAIL or ERROR in contract order; PASS when all observations agree.

    `views` are baseline_a's, baseline_b's and the candidate's (rank 0's)
    phase snapshots; `rank_views` every rank's, for a multi-rank candidate.
    `compared_on` says how the candidate was compared (None: as observed,
    rank 0 for ranks).
    """
    baseline_a, baseline_b, candidate = views
    compared = compared_candidate(candidate, rank_views)
    if isinstance(compared, Decision):
        return compared
    candidate, compared_on = compared
    disagreement = _first_disagreement(
        policy, baseline_a, baseline_b, candidate, rank_views, own_step=own_step
    )
    if disagreement is None:
        return passed(compared_on=compared_on)
    return dataclasses.replace(disagreement, compared_on=compared_on)


def _first_disagreement(
    policy: ExactComparison | ToleranceComparison,
    baseline_a: Views,
    baseline_b: Views,
    candidate: Views,
    rank_views: Sequence[Views],
    *,
    own_step: bool,
) -> Decision | None:
    before = disagreement_before_phases(
        policy, baseline_a, baseline_b, candidate, rank_views, own_step=own_step
    )
    if before is not None:
        return before
    for phase in PHASES:
        if phase not in candidate:  # an own step that did not report its losses
            continue
        # With the elements around each tensor's first differing one, as resume previews them.
        differences, windows = differences_with_windows(
            policy, baseline_a[phase], baseline_b[phase]
        )
        if differences:
            return dataclasses.replace(
                _diverged(Outcome.ABSTAIN, "baseline self-consistency failed", phase, differences),
                value_windows=windows,
            )
        differences, windows = differences_with_windows(policy, baseline_a[phase], candidate[phase])
        if differences:
            return dataclasses.replace(
                _diverged(
                    Outcome.FAIL,
                    f"first observed divergence in {phase}; not a root-cause claim",
                    phase,
                    differences,
                ),
                value_windows=windows,
            )
    return None


def disagreement_before_phases(
    policy: Any,
    baseline_a: Views,
    baseline_b: Views,
    candidate: Views,
    rank_views: Sequence[Views],
    *,
    own_step: bool,
) -> Decision | None:
    """The judgments before the phases: initial states, an own step's step counts, the ranks.

    Exact under every policy that reaches them this way; NoiseComparison
    (accumulation/noise_verdict.py) passes ExactComparison for each baseline.
    None when they all agree.
    """
    initial = _judge_initial(policy, baseline_a[INITIAL_KEY], baseline_b[INITIAL_KEY], candidate)
    if initial is not None:
        return initial
    if own_step:
        for phase, component in ((OPTIMIZER_PHASE, "optimizer"), (SCHEDULER_PHASE, "scheduler")):
            count = _judge_step_count(
                policy, phase, component, baseline_a, baseline_b, rank_views or [candidate]
            )
            if count is not None:
                return count
    disagreement = rank_differences(policy, rank_views) if rank_views else None
    if disagreement is not None:
        message, differences = disagreement
        return _diverged(Outcome.FAIL, message, "ranks", differences)
    return None


def _judge_initial(
    policy: ExactComparison | ToleranceComparison,
    baseline_a: Snapshot,
    baseline_b: Snapshot,
    candidate: Views,
) -> Decision | None:
    for other, message in (
        (baseline_b, "baseline initial-state self-consistency failed"),
        (candidate[INITIAL_KEY], "candidate did not start from verified-equal initial state"),
    ):
        differences = policy.compare_all(baseline_a, other)
        if differences:
            return _diverged(Outcome.ABSTAIN, message, INITIAL_STATE, differences, verified=False)
    return None


def _judge_step_count(
    policy: ExactComparison | ToleranceComparison,
    phase: str,
    component: str,
    baseline_a: Views,
    baseline_b: Views,
    candidates: Sequence[Views],
) -> Decision | None:
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
        return None
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
        return _diverged(
            Outcome.FAIL,
            f"first observed divergence in {phase}: {who} called {component}.step "
            f"{counted} times in one update (the reference: {reference}); not a root-cause claim",
            phase,
            (*count_difference, *rest),
        )
    return None


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


def _diverged(
    outcome: Outcome,
    message: str,
    phase: str,
    differences: tuple[Difference, ...],
    *,
    verified: bool = True,
) -> Decision:
    return Decision(
        outcome,
        message,
        first_observed_phase=phase,
        primary_difference=differences[0],
        all_differences=differences,
        verified_equal_initial_state=verified,
    )
