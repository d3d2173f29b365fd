"""check_resume's verdict under NoiseComparison: the messages, and the final states when nothing was recorded.

The decision order is the exact check's: samples that disagree where they
must not (or noise above `max_noise`) abstain, then a candidate outside the
envelope fails at its first step, else the check passes and says how close
the candidate came. resume/execution.py runs the phases and calls these.
"""

from __future__ import annotations

import math
from typing import Any

from trainparity._internal.comparison.envelope import excursion_words
from trainparity._internal.comparison.noise import NoiseComparison
from trainparity._internal.outcomes import Outcome
from trainparity._internal.recording.envelope_steps import EnvelopeEvent

__all__ = ["baseline_names", "event_verdict", "pass_message", "split_differs_message"]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def baseline_names(count: int) -> tuple[str, ...]:
    """baseline_a, baseline_b, baseline_c, … : the uninterrupted runs of a check."""
    return tuple(f"baseline_{letter}" for letter in _LETTERS[:count])


def event_verdict(
    event: EnvelopeEvent, policy: NoiseComparison, reference: str, split_phase: str, split_step: int
) -> tuple[Outcome, str]:
    """The outcome and message of the event that decided."""
    path = event.differences[0].path if event.differences else "$"
    if event.kind == "samples_differ":
        if event.phase == split_phase:
            return Outcome.ABSTAIN, split_differs_message(
                split_phase, reference, event.step, path, split_step
            )
        return Outcome.ABSTAIN, (
            f"baseline self-consistency failed at step {event.step}: {event.phase} differs from "
            f"{reference} at {path}, which NoiseComparison holds exact (not a floating-point "
            "value); resume attribution is unsafe"
        )
    if event.kind == "too_noisy":
        entry = event.entry
        assert entry is not None
        return Outcome.ABSTAIN, (
            f"the run-to-run noise at step {event.step} is {_g(entry.noise)} (relative L2, at "
            f"{entry.path}), above max_noise={_g(policy.max_noise)}: a fault that moves the "
            "state by less than that at that step cannot be seen"
        )
    entry = event.entry
    message = f"first observed divergence at step {event.step}: {path}"
    words = excursion_words(entry, policy)
    if words is not None:
        message += f" left the noise envelope ({words})"
    return Outcome.FAIL, message


def split_differs_message(
    split_phase: str, reference: str, step: int, path: str, split_step: int
) -> str:
    """Why a difference of candidate_split before its save is nondeterminism, not the resume's fault."""
    return (
        f"{split_phase} differs from {reference} at step {step} ({path}), before its save at "
        f"step {split_step}: up to the split it is one more uninterrupted run, so training is "
        "not deterministic there and resume attribution is unsafe"
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
