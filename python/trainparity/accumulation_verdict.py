"""The verdict of one accumulation check from what its children observed, in contract order.

The initial states first (ABSTAIN unless verified equal), then a multi-rank
candidate's ranks against each other, then the phases in contract order: the
baselines against each other (ABSTAIN) and the candidate (rank 0) against the
reference (FAIL).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from trainparity.accumulation_plan import INITIAL_KEY, PHASES
from trainparity.accumulation_ranks import rank_differences
from trainparity.comparison import Difference, ExactComparison, ToleranceComparison
from trainparity.outcomes import Outcome
from trainparity.snapshot import Snapshot

__all__ = ["Verdict", "judge_observations"]

INITIAL_STATE = "initial_state"

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
) -> None:
    """Raise the first ABSTAIN or FAIL Verdict; return when all observations agree.

    `views` are baseline_a's, baseline_b's and the candidate's (rank 0's)
    phase snapshots; `rank_views` every rank's, for a multi-rank candidate.
    """
    baseline_a, baseline_b, candidate = views
    _judge_initial(policy, baseline_a[INITIAL_KEY], baseline_b[INITIAL_KEY], candidate)
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


def _differences(
    phase: str, differences: tuple[Difference, ...], *, verified: bool
) -> dict[str, Any]:
    return {
        "first_observed_phase": phase,
        "primary_difference": differences[0],
        "all_differences": differences,
        "verified_equal_initial_state": verified,
    }
