"""The verdict read against what the children's steps did: random draws and gradient clipping.

A step that draws random numbers (dropout in training mode) draws a mask
shaped like its batch, so the full batch and the microbatches compute
different things: the declared relation cannot hold bit for bit, and a
difference says nothing about the accumulation (ABSTAIN, saying what to do).
A loop that clips where the plan declares no clipping is compared with a
reference that did not clip (ABSTAIN, naming the declaration). A clipping
difference the plan did declare is a FAIL worded as what the loop did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from trainparity._internal.accumulation.verdict import Decision
from trainparity._internal.outcomes import Outcome

__all__ = ["read_with_step_facts"]

CLIPPING = "clipping"
UNREPORTED_LOSSES = (
    "; train_step returned no LossAccounting, so its loss scale was judged only through the "
    "gradients and the update, which clipping and Adam normalise (return one per microbatch: "
    'docs/accumulation.md, "Return the loss terms")'
)
AFTER_THE_GRADIENTS = ("optimizer_state", "parameter_update")
AMPLIFIED_ROUNDING = (
    "; the gradients agreed within the tolerance: an Adam-type optimizer turns the rounding "
    "of a gradient near zero into a full-size update, so a tolerance that fits the gradients "
    "does not fit the update; judge with NoiseComparison(), which measures the rounding a "
    "split brings (docs/accumulation.md)"
)


def read_with_step_facts(
    decision: Decision,
    *,
    random_modules: Sequence[str],
    drew: bool,
    noise_measured: bool,
    declared_clip: float | None,
    microbatch_count: int,
    candidate_clipping: Mapping[str, object] | None,
    reference_clipping: Mapping[str, object] | None,
    own_step: bool,
    tolerance: bool = False,
    losses_unreported: bool = False,
) -> Decision:
    """`decision`, turned or reworded by the steps' random draws and clipping.

    `drew`: some child's step moved torch's generators; `random_modules` the
    dropout modules in training mode; `noise_measured`: a NoiseComparison
    envelope measured a non-zero spread (with random draws, the masks');
    `candidate_clipping`/`reference_clipping`: what the gradient phase
    recorded under `clipping` (None: no clipping before the step);
    `own_step`: the candidate ran the case's train_step (else the plan's loop);
    `tolerance`: judged under ToleranceComparison, where a FAIL after the
    gradients agreed gets a pointer to NoiseComparison; `losses_unreported`:
    train_step returned None, which a PASS says (clipping and Adam can hide a
    wrong loss scale from the gradients and the update).
    """
    who = "train_step" if own_step else "the plan's loop"
    if drew and (
        decision.outcome is Outcome.FAIL or (decision.outcome is Outcome.PASS and noise_measured)
    ):
        return dataclasses.replace(
            decision, outcome=Outcome.ABSTAIN, message=_random_message(decision, random_modules)
        )
    if decision.outcome is Outcome.PASS and losses_unreported:
        return dataclasses.replace(decision, message=decision.message + UNREPORTED_LOSSES)
    if decision.outcome is not Outcome.FAIL or decision.primary_difference is None:
        return decision
    if (
        tolerance
        and decision.first_observed_phase in AFTER_THE_GRADIENTS
        and decision.primary_difference.reason == "tensor_value"
    ):
        return dataclasses.replace(decision, message=decision.message + AMPLIFIED_ROUNDING)
    path = decision.primary_difference.path
    if path != CLIPPING and not path.startswith(CLIPPING + "."):
        return decision
    if candidate_clipping is not None and reference_clipping is None:
        return dataclasses.replace(
            decision,
            outcome=Outcome.ABSTAIN,
            message=_undeclared_message(who, candidate_clipping, declared_clip, microbatch_count),
        )
    detail = _clipping_detail(who, path, candidate_clipping, reference_clipping, declared_clip)
    return dataclasses.replace(
        decision,
        message=f"first observed divergence in {decision.first_observed_phase}: {detail}; "
        "not a root-cause claim",
    )


def _random_message(decision: Decision, modules: Sequence[str]) -> str:
    where = (
        f"dropout in training mode at {', '.join(modules)}"
        if modules
        else "a module or function that draws from torch's generator"
    )
    seen = ""
    if decision.outcome is Outcome.FAIL and decision.primary_difference is not None:
        seen = (
            f" (the first difference was in {decision.first_observed_phase}, at "
            f"{decision.primary_difference.path})"
        )
    elif decision.outcome is Outcome.PASS:
        seen = " (the noise envelope would have measured the masks, not rounding)"
    return (
        f"the step draws random numbers ({where}): the full batch and each microbatch draw "
        "masks of their own shape, so they compute different things and the declared relation "
        f"cannot hold bit for bit{seen}; check the accumulation with dropout off (build the "
        "case with p=0, or put the dropout modules in eval mode after any model.train() "
        "in the step), or draw each sample's mask from a generator seeded by the sample's "
        "index, so that a sample gets the same mask in any batch"
    )


def _undeclared_message(
    who: str, clipping: Mapping[str, object], declared: float | None, microbatch_count: int
) -> str:
    function = clipping.get("function")
    if function == "clip_grad_value_":
        return (
            f"{who} clipped the gradients with clip_grad_value_(clip_value="
            f"{clipping.get('clip_value')!r}) before optimizer.step, but the reference clips "
            "by norm only (the plan's clip_grad_norm): check the accumulation without value "
            "clipping, or clip by norm and declare it"
        )
    limit = clipping.get("max_norm")
    return (
        f"{who} clipped the gradients with clip_grad_norm_(max_norm={limit!r}) before "
        f"optimizer.step, but the plan declares clip_grad_norm={declared!r}, so the reference "
        f"did not clip: declare AccumulationExecutionPlan({microbatch_count}, "
        f"clip_grad_norm={limit!r}) (the reference clips the full batch once with it)"
    )


def _clipping_detail(
    who: str,
    path: str,
    candidate: Mapping[str, object] | None,
    reference: Mapping[str, object] | None,
    declared: float | None,
) -> str:
    if candidate is None:
        return (
            f"{who} did not clip before optimizer.step, though the plan declares "
            f"clip_grad_norm={declared!r} (the reference clips once, after the last backward)"
        )
    if path == f"{CLIPPING}.calls":
        return (
            f"{who} clipped the gradients {candidate.get('calls')} times before "
            "optimizer.step (the reference: once, after the last backward)"
        )
    if path == f"{CLIPPING}.total_norm" and reference is not None:
        found, expected = candidate.get("total_norm"), reference.get("total_norm")
        if isinstance(found, float) and isinstance(expected, float) and expected > 0:
            return (
                f"the gradients {who} clipped had norm {found:.6g} where the full "
                f"batch's had {expected:.6g} ({found / expected:.3g}×): the accumulated "
                "gradients are not the full batch's, though clipping brought both to the "
                "same norm"
            )
    return f"{who} clipped as {_clip_call(candidate)}, the reference as {_clip_call(reference)}"


def _clip_call(clipping: Mapping[str, object] | None) -> str:
    if clipping is None:
        return "nothing"
    arguments = ", ".join(
        f"{key}={clipping[key]!r}"
        for key in ("max_norm", "norm_type", "clip_value")
        if key in clipping
    )
    return f"{clipping.get('function')}({arguments})"
