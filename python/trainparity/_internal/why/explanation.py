"""What explain() found, in a report's words: the Explanation, its sentence, and each lead tried."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.reported import ReportedResult

__all__ = ["Explanation", "LeadTrial", "explanation_sentence", "shown_values"]


@dataclass(frozen=True, repr=False)
class Explanation(ReportedResult):
    """Why two runs of a check part: the first op of the first divergent step, and the leads tested.

    `outcome` is PASS when a lead is confirmed (or the first op is an
    unseeded random draw), ABSTAIN when nothing explains the divergence,
    ERROR when the reruns could not run.
    """

    outcome: Outcome
    message: str
    case: str
    step: int | None = None
    rank: int = 0  # the rank whose records part first (each rank traces its own step)
    sides: tuple[str, ...] = ()
    first_op: dict[str, Any] | None = None
    trace_message: str | None = None
    leads: tuple[LeadTrial, ...] = ()
    reruns: int = 0
    timing_seconds: dict[str, float] = field(default_factory=dict)


def explanation_sentence(
    confirmed: list[LeadTrial],
    trials: list[LeadTrial],
    first_op: dict[str, Any] | None,
    rng_op: bool,
    had_knobs: bool,
    original: tuple[int, float] | None,
    repeats: bool,
) -> str:
    """The Explanation's message: what the reruns showed, then the first op where the runs part."""
    where = ""
    if first_op is not None and first_op.get("call_counts"):
        # Only ops whose calls cannot be paired differ (trace_diff.py): named, not as the cause.
        baseline_calls, candidate_calls = first_op["call_counts"]
        where = (
            f"; the first op whose output differed is {first_op['op']} in "
            f"{first_op.get('module') or 'the script'}, called {baseline_calls} times in one "
            f"step and {candidate_calls} in the other, so not necessarily where they part"
        )
    elif first_op is not None:
        where = f"; the first op where they part is {first_op['op']} in {first_op.get('module') or 'the script'} ({first_op.get('origin')})"
    if original is None:
        return "the reruns did not part: the divergence did not reproduce here" + where
    if confirmed:
        trial = confirmed[0]
        if had_knobs:
            return (
                f"the divergence is explained by {trial.knob}: {trial.rerun} reproduces the "
                "other run bit for bit on this machine" + where
            )
        return f"the repeats agree when {trial.a} is pinned (confirmed)" + where
    who = "the two sides" if had_knobs else "the repeats"
    if not repeats and not had_knobs:
        if rng_op:
            return (
                "the two runs share one environment; the first differing op draws random "
                "numbers: the generator's state differs between them (one that a resume does "
                "not restore)" + where
            )
        return (
            "the two runs share one environment, so their difference is their own (the resume, "
            "or the variant's arguments)" + where
        )
    if rng_op:
        return (
            f"no knob makes {who} agree; the first differing op draws random numbers: an RNG "
            "that is not seeded" + where
        )
    if not trials:
        return "no settable knob differs between the two sides; the leads stay leads" + where
    if not had_knobs:
        return "no knob makes the repeats agree" + where
    return "no knob tested here explains the divergence; the leads stay leads" + where


@dataclass(frozen=True)
class LeadTrial:
    """One lead and what its rerun showed."""

    knob: str
    a: str
    b: str
    # "confirmed", "partial", "ruled out" (the fingerprints show the knob took),
    # "not controllable from outside" (the script sets it in code), "no effect seen" (no
    # fingerprint keeps it), "not testable here", "not tested"
    status: str
    evidence: str
    rerun: str = ""  # which side was rerun with which values ("one_a with OMP_NUM_THREADS=2")


def shown_values(values: Mapping[str, str | None]) -> str:
    shown = [f"{name}={value}" for name, value in values.items() if value is not None]
    return " ".join(shown) if shown else "unset"
