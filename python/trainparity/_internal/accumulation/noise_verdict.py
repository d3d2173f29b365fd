"""check_accumulation under NoiseComparison: the candidate's phases against the spread of repeated baselines.

The baselines repeat the full-batch execution (`baselines` of them), for a
GPU whose backward is nondeterministic. The initial states, the step counts
of a case's own train_step and a multi-rank candidate's ranks stay exact, as
under the exact comparison; each observed phase (loss accounting, gradient,
optimizer state, parameter update, scheduler state) is then judged against
the envelope of the baselines' same phase, in contract order, each phase's
noise carried into the next (what a gradient's rounding moves, the update
inherits).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trainparity._internal.accumulation.plan import PHASES
from trainparity._internal.accumulation.sharded import (
    SHARDED_COMPARISON,
    ReassemblyError,
    global_views,
    holds_shards,
)
from trainparity._internal.accumulation.verdict import Verdict, judge_before_phases
from trainparity._internal.comparison.envelope import PathEnvelope, excursion_words, judge_step
from trainparity._internal.comparison.noise import NoiseComparison
from trainparity._internal.outcomes import Outcome
from trainparity._internal.recording.trajectory import component_of
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
) -> tuple[str | None, dict[str, Any]]:
    """Raise the first ABSTAIN or FAIL Verdict (its fields carry `noise_envelope`); else
    return (how the candidate was compared, the `noise_envelope` report)."""
    exact = policy.exact
    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {
        **policy.settings(),
        "judged_on": "phases of one optimizer-update boundary",
        "samples": [f"baseline_{chr(ord('a') + index)}" for index in range(len(baselines))],
        "steps": rows,
    }
    # Every baseline's initial state and step counts must agree exactly with baseline_a's:
    # the exact judgment of baseline_a, baseline_x and the candidate, for each other baseline.
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
        for other in baselines[1:]:
            judge_before_phases(
                exact, baselines[0], other, candidate, rank_views, own_step=own_step
            )
    except Verdict as verdict:
        verdict.fields["noise_envelope"] = _finished(report, rows)
        if compared_on is not None:
            verdict.fields["compared_on"] = compared_on
        raise
    noise_so_far: dict[str, float] = {}
    for index, phase in enumerate(PHASES, start=1):
        if phase not in candidate:  # an own step that did not report its losses
            continue
        judged = judge_step(
            policy, [view[phase] for view in baselines], candidate[phase], noise_so_far
        )
        rows.append(_row(index, phase, judged.paths))
        fields: dict[str, Any] = {
            "first_observed_phase": phase,
            "verified_equal_initial_state": True,
            "noise_envelope": None,
            **({"compared_on": compared_on} if compared_on is not None else {}),
        }
        if judged.sample_differences:
            sample, found = judged.sample_differences[0]
            fields["noise_envelope"] = _finished(report, rows)
            raise Verdict(
                Outcome.ABSTAIN,
                f"baseline self-consistency failed in {phase}: baseline_{chr(ord('a') + sample)} "
                f"differs from baseline_a at {found.path}, which NoiseComparison holds exact",
                primary_difference=found,
                all_differences=tuple(d for _, d in judged.sample_differences),
                **fields,
            )
        noisy = judged.too_noisy(policy.max_noise)
        if noisy is not None:
            fields["noise_envelope"] = _finished(report, rows)
            raise Verdict(
                Outcome.ABSTAIN,
                f"the noise in {phase} is {noisy.noise:.3g} (relative L2, at {noisy.path}), above "
                f"max_noise={policy.max_noise:.3g}: a difference smaller than that cannot be seen",
                primary_difference=judged.differences[0] if judged.differences else None,
                **fields,
            )
        if judged.differences:
            first = judged.differences[0]
            entry = next((e for e in judged.paths if e.path == first.path and e.outside), None)
            fields["noise_envelope"] = _finished(report, rows)
            raise Verdict(
                Outcome.FAIL,
                f"first observed divergence in {phase}; not a root-cause claim"
                + _exit_detail(entry, policy),
                primary_difference=first,
                all_differences=judged.differences,
                **fields,
            )
    return compared_on, _finished(report, rows)


def _row(index: int, phase: str, paths: Sequence[PathEnvelope]) -> dict[str, Any]:
    noise: dict[str, float] = {}
    excursion: dict[str, float] = {}
    limit: dict[str, float] = {}
    for entry in paths:
        component = component_of(entry.path)
        noise[component] = max(noise.get(component, 0.0), entry.noise)
        limit[component] = max(limit.get(component, 0.0), entry.limit)
        if entry.excursion is not None:
            excursion[component] = max(excursion.get(component, 0.0), entry.excursion)
    ratios = [entry for entry in paths if entry.ratio]
    worst = max(ratios, key=lambda entry: entry.ratio or 0.0) if ratios else None
    return {
        "step": index,
        "phase": phase,
        "rank": 0,
        "candidate": "candidate",
        "noise": dict(sorted(noise.items())),
        "excursion": dict(sorted(excursion.items())),
        "limit": dict(sorted(limit.items())),
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


def _exit_detail(entry: PathEnvelope | None, policy: NoiseComparison) -> str:
    words = excursion_words(entry, policy)
    return (
        ""
        if words is None or entry is None
        else f" ({entry.path} left the noise envelope: {words})"
    )
