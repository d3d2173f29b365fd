"""Each lead tested by a rerun: a knob set on one side to the other's value, or pinned on both.

A knob that differs between the two sides is set on one side to the other
side's value; when no single knob explains the divergence, pairs are tried
until one does. Two repeats of one environment share every knob, so the
standard determinism knobs are pinned on both instead. Every batch of
reruns runs side by side.

What a rerun shows about a knob is judged against the fingerprints the
reruns recorded (knob_check.py): "ruled out" only when they show the knob
took its value in every process compared; "not controllable from outside"
when one shows another value (the script sets it in code); "no effect seen"
when no fingerprint keeps it, so that it took is not known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from pathlib import Path

from trainparity._internal.why.explanation import LeadTrial, shown_values
from trainparity._internal.why.knob_check import OVERRIDDEN, TOOK, knob_took
from trainparity._internal.why.knobs import DETERMINISM_KNOBS, Knob
from trainparity._internal.why.parting import parting, status_of
from trainparity._internal.why.reruns import Reruns, Side

__all__ = ["NO_EFFECT_SEEN", "NOT_CONTROLLABLE", "judged", "tested_leads"]

NOT_CONTROLLABLE = "not controllable from outside"
NO_EFFECT_SEEN = "no effect seen"


def tested_leads(
    knobs: Sequence[tuple[Knob, dict[str, str | None], dict[str, str | None]]],
    reruns: Reruns,
    sides: tuple[Side, Side],
    traced: dict[str, Path],
    original: tuple[int, float] | None,
    *,
    max_reruns: int,
    repeats: bool,
    gpu: bool = False,
) -> list[LeadTrial]:
    """Each differing knob tested by a rerun (single knobs, then pairs), or, for two repeats of
    one environment (`repeats`), each determinism knob pinned on both; `max_reruns` bounds them.
    `gpu`: the runs could use a GPU; otherwise GPU knobs are not tried, nor listed."""
    trials: list[LeadTrial] = []
    budget = max_reruns
    if knobs:
        tested = knobs[:budget]
        budget -= len(tested)
        # Every single knob at once: the reruns are independent and run side by side.
        trials.extend(_knob_trials(reruns, sides, tested, traced, original))
        trials.extend(
            LeadTrial(
                knob.name,
                shown_values(left),
                shown_values(right),
                "not tested",
                "--max-reruns reached",
            )
            for knob, left, right in knobs[len(tested) :]
        )
        # No single knob explains it: pairs, until one does (the smallest set that does).
        if not any(trial.status == "confirmed" for trial in trials):
            for first, second in combinations(knobs, 2):
                if budget <= 0:
                    break
                budget -= 1
                pair = Knob(f"{first[0].name} + {second[0].name}", ())
                (trial,) = _knob_trials(
                    reruns,
                    sides,
                    [(pair, {**first[1], **second[1]}, {**first[2], **second[2]})],
                    traced,
                    original,
                )
                trials.append(trial)
                if trial.status == "confirmed":
                    break
    elif original is not None and repeats:
        pinned = []
        for knob, values in DETERMINISM_KNOBS:
            if knob.gpu_only and not gpu:
                continue  # a CPU run: a GPU knob is no lead at all
            if budget > 0:
                budget -= 1
                pinned.append((knob, values))
        trials[:0] = _pinned_trials(reruns, sides, pinned, original)
    return trials


def judged(status: str, evidence: str, took: tuple[str, str]) -> tuple[str, str]:
    """A rerun's status and evidence, checked against whether its knob took (knob_took)."""
    verdict, shown = took
    if verdict == OVERRIDDEN:
        return (
            NOT_CONTROLLABLE,
            f"the script sets it in code, over the environment ({shown}); {evidence}",
        )
    if status == "ruled out":
        if verdict == TOOK:
            return status, f"{evidence}; {shown}"
        return NO_EFFECT_SEEN, f"{evidence}; unverified: {shown}, so that it took is not known"
    return status, evidence


def _knob_trials(
    reruns: Reruns,
    sides: tuple[Side, Side],
    knobs: Sequence[tuple[Knob, dict[str, str | None], dict[str, str | None]]],
    traced: dict[str, Path],
    original: tuple[int, float] | None,
) -> list[LeadTrial]:
    """Each knob tested by one rerun of a side at the other side's values, all in one batch."""
    a, b = sides
    planned: list[tuple[int, str, Side, dict[str, str], Path, Side]] = []
    found: list[LeadTrial | None] = []
    for index, (knob, left, right) in enumerate(knobs):
        set_left = {name: value for name, value in left.items() if value is not None}
        set_right = {name: value for name, value in right.items() if value is not None}
        if set(set_right) <= set(set_left):  # B's variables can all be set to A's values
            rerun_side, values, target, other = b, set_left, traced["a"], a
        elif set(set_left) <= set(set_right):
            rerun_side, values, target, other = a, set_right, traced["b"], b
        else:
            found.append(
                LeadTrial(
                    knob.name,
                    shown_values(left),
                    shown_values(right),
                    "not testable here",
                    "each side sets a variable of it the other leaves unset",
                )
            )
            continue
        name = "knob-" + "".join(c if c.isalnum() or c in "_-" else "-" for c in knob.name)
        planned.append((index, name, rerun_side, values, target, other))  # type: ignore[arg-type]
        found.append(None)
    ran = (
        reruns.run([(name, side, values, False) for _, name, side, values, _, _ in planned])
        if planned
        else {}
    )
    for index, name, side, values, target, other in planned:
        knob, left, right = knobs[index]
        status, evidence = status_of(parting(ran[name], target), original)
        # Both sides must hold the values: the rerun, and the side it is compared with.
        took = knob_took(values, reruns.fingerprints(name, target.name))
        status, evidence = judged(status, evidence, took)
        described = f"{side.label} with {shown_values(values)}"
        found[index] = LeadTrial(
            knob.name,
            shown_values(left),
            shown_values(right),
            status,
            f"{described} against {other.label}: {evidence}",
            described,
        )
    return [trial for trial in found if trial is not None]


def _pinned_trials(
    reruns: Reruns,
    sides: tuple[Side, Side],
    pinned: Sequence[tuple[Knob, Mapping[str, str]]],
    original: tuple[int, float],
) -> list[LeadTrial]:
    """Both sides rerun with each determinism knob pinned, every pair in one batch: agree then?"""
    batch = []
    for knob, values in pinned:
        batch += [(f"pin-{knob.name}-a", sides[0], values, False)]
        batch += [(f"pin-{knob.name}-b", sides[1], values, False)]
    ran = reruns.run(batch) if batch else {}
    trials = []
    for knob, values in pinned:
        found = parting(ran[f"pin-{knob.name}-a"], ran[f"pin-{knob.name}-b"])
        status, evidence = status_of(found, original)
        took = knob_took(values, reruns.fingerprints(f"pin-{knob.name}-a", f"pin-{knob.name}-b"))
        status, evidence = judged(status, evidence, took)
        shown = shown_values(dict(values))
        trials.append(
            LeadTrial(knob.name, shown, shown, status, f"both sides with {shown}: {evidence}")
        )
    return trials
