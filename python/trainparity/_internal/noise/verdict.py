"""The verdict of an envelope judgment: its outcome and its message, for every check.

A judgment under NoiseComparison ends in an EnvelopeEvent (noise/walk.py),
or in none (the check passes and words its own closest approach). Each kind
of event has one outcome:

- "samples_differ": the samples disagree where the envelope holds values
  exact, so they do not measure noise: ABSTAIN;
- "too_noisy": the noise passed `max_noise`, so a fault smaller than the
  noise would go unseen: ABSTAIN, in one sentence for every check;
- "candidate_left": the candidate differs where it must not, or left the
  envelope: FAIL, with how far it went (`excursion_words`).

Who disagreed and where the candidate left are named in each check's own
terms (baseline_b, the noise pair, a variant, a phase of the update), so a
check hands those two phrases in; the outcome and the shared words are
decided here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.noise.envelope import PathEnvelope
from trainparity._internal.noise.walk import EnvelopeEvent
from trainparity._internal.outcomes import Outcome

__all__ = ["envelope_verdict", "excursion_words", "too_noisy_message"]

# (the event, the path of its first difference) -> the message
SamplesDiffer = Callable[[EnvelopeEvent, str], str]
# (the event, the path of its first difference, excursion_words of its exit or None) -> the message
CandidateLeft = Callable[[EnvelopeEvent, str, str | None], str]


def envelope_verdict(
    event: EnvelopeEvent,
    policy: NoiseComparison,
    *,
    samples_differ: SamplesDiffer,
    candidate_left: CandidateLeft,
    where: str | None = None,
) -> tuple[Outcome, str]:
    """The outcome and message of the event that decided a check.

    `where` places a too-noisy judgment ("in gradients"); the default is the
    event's step.
    """
    path = event.differences[0].path if event.differences else "$"
    if event.kind == "samples_differ":
        return Outcome.ABSTAIN, samples_differ(event, path)
    if event.kind == "too_noisy":
        assert event.entry is not None
        placed = where if where is not None else f"at step {event.step}"
        return Outcome.ABSTAIN, too_noisy_message(event.entry, policy, placed)
    return Outcome.FAIL, candidate_left(event, path, excursion_words(event.entry, policy))


def too_noisy_message(entry: PathEnvelope, policy: NoiseComparison, where: str) -> str:
    """Why a check abstains when the noise passed `max_noise` (`where`: "at step 3")."""
    return (
        f"the run-to-run noise {where} is {_number(entry.noise)} (relative L2, at {entry.path}), "
        f"above max_noise={_number(policy.max_noise)}: a fault that moves the state by less "
        "than that cannot be seen there"
    )


def excursion_words(entry: PathEnvelope | None, policy: NoiseComparison) -> str | None:
    """How far a path left the envelope, as every verdict words it; None for an exact path."""
    if entry is None or entry.exact or entry.excursion is None:
        return None
    ratio = entry.ratio if entry.ratio is not None else math.inf
    return (
        f"excursion {entry.excursion:.3g} is {ratio:.3g}× the noise {entry.noise:.3g}; "
        f"declared limit {policy.factor:g}×" + (" plus the floor" if policy.has_floor else "")
    )


def _number(value: float | None) -> str:
    return "none" if value is None else f"{value:.3g}"
