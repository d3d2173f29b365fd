"""check_resume's verdict under NoiseComparison, in check_resume's words.

The decision order is the exact check's: samples that disagree where they
must not (or noise above `max_noise`) abstain, then a candidate outside the
envelope fails at its first step, else the check passes and says how close
the candidate came. noise/verdict.py decides the outcome and words what
every check shares; this module names check_resume's runs (baseline_a, …,
candidate_split before its save). resume/execution.py runs the phases and
calls these.
"""

from __future__ import annotations

import math
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.noise.verdict import envelope_verdict
from trainparity._internal.noise.walk import EnvelopeEvent
from trainparity._internal.outcomes import Outcome

__all__ = [
    "baseline_names",
    "event_verdict",
    "pass_message",
    "split_differs_message",
    "split_setting_message",
]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def baseline_names(count: int) -> tuple[str, ...]:
    """baseline_a, baseline_b, baseline_c, … : the uninterrupted runs of a check."""
    return tuple(f"baseline_{letter}" for letter in _LETTERS[:count])


def event_verdict(
    event: EnvelopeEvent, policy: NoiseComparison, reference: str, split_phase: str, split_step: int
) -> tuple[Outcome, str]:
    """The outcome and message of the event that decided."""

    def samples_differ(event: EnvelopeEvent, path: str) -> str:
        if event.phase == split_phase:
            return split_differs_message(split_phase, reference, event.step, path, split_step)
        return (
            f"baseline self-consistency failed at step {event.step}: {event.phase} differs from "
            f"{reference} at {path}, which NoiseComparison holds exact (not a floating-point "
            "value); resume attribution is unsafe"
        )

    def candidate_left(event: EnvelopeEvent, path: str, words: str | None) -> str:
        message = f"first observed divergence at step {event.step}: {path}"
        return message if words is None else f"{message} left the noise envelope ({words})"

    return envelope_verdict(
        event, policy, samples_differ=samples_differ, candidate_left=candidate_left
    )


def split_differs_message(
    split_phase: str, reference: str, step: int, path: str, split_step: int
) -> str:
    """Why a difference of candidate_split before its save is nondeterminism, not the resume's fault."""
    return (
        f"{split_phase} differs from {reference} at step {step} ({path}), before its save at "
        f"step {split_step}: up to the split it is one more uninterrupted run, so training is "
        "not deterministic there and resume attribution is unsafe"
    )


def split_setting_message(
    split_phase: str, reference: str, step: int, cause: Any, split_step: int
) -> str:
    """Why a difference of candidate_split before its save is a setting, not nondeterminism:
    each run holds the value constant (why/likely_cause.py, setting_cause)."""
    return (
        f"{split_phase} differs from {reference} at step {step} in {cause.path} "
        f"({cause.baseline} against {cause.candidate}), a value each run holds constant in "
        f"every record: a setting the runs compute differently, not noise. {split_phase} runs "
        f"only to the split step ({split_step}), so a setting computed from its end step "
        "differs there: compute it from the total step count instead; resume attribution is "
        "unsafe until then"
    )


def pass_message(closest: dict[str, Any] | None, judged_on: str) -> str:
    where = "every recorded step" if judged_on == "recorded steps" else "the final state"
    if closest is None:
        return f"the candidate matched the baselines bit for bit at {where}"
    return (
        f"the candidate stayed inside the noise envelope at {where}; closest approach: "
        f"{_g(closest['ratio'])}× the noise at step {closest['step']}, {closest['path']}"
    )


def _g(value: float | None) -> str:
    if value is None:
        return "none"
    return "inf" if math.isinf(value) else f"{value:.3g}"
