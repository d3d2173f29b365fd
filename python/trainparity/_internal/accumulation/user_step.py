"""The user's own training step in check_accumulation: what it may be given, and how it is observed.

A case may define `train_step(state, microbatches)`: one optimizer update
written the way the user's trainer writes it. The candidate child calls it
instead of running the declared plan. Nothing in it needs to cooperate with
the check: `optimizer.step` and `scheduler.step` of the built objects are
wrapped on the instances for the duration of the call (and restored
afterwards), so the gradients are observed when the optimizer is first asked
to step, the optimizer state when it last returns from a step, and both
kinds of calls are counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from trainparity._internal.accumulation.plan import RANK_FAULTS, SINGLE_RANK_FAULTS
from trainparity._internal.cases.loading import CaseSetupError
from trainparity._internal.protocols import LossAccounting
from trainparity._internal.state.freeze import FrozenMapping

if TYPE_CHECKING:
    import torch

    from trainparity._internal.accumulation.step_probes import ClipRecorder
    from trainparity._internal.state.snapshot_capture import CaptureResult

__all__ = [
    "DECLARATIVE_LOOP_FLAGS",
    "TRAIN_STEP",
    "MixedAccounting",
    "StepObserver",
    "check_own_step_plan",
    "has_train_step",
    "returned_loss_record",
    "with_step_calls",
]

TRAIN_STEP = "train_step"

DECLARATIVE_LOOP_FLAGS = (
    "scale_accumulated_loss",
    "use_explicit_loss_accounting",
    *SINGLE_RANK_FAULTS,
    *RANK_FAULTS,
)
"""Plan fields that describe our model of a loop; a case with its own step makes them meaningless."""


def has_train_step(case: object) -> bool:
    """Whether the case brings its own training step (a callable `train_step`)."""
    return callable(getattr(case, TRAIN_STEP, None))


def check_own_step_plan(plan: Any) -> None:
    """Raise ValueError when `plan` sets a flag of the declarative loop that an own step ignores.

    With `train_step` the candidate runs the user's loop: only the microbatch
    count (and the reference's `clip_grad_norm`) still mean something.
    Silently ignoring a fault flag would let a check PASS that the user
    believes exercises the fault.
    """
    defaults = type(plan)(plan.microbatch_count)
    changed = [
        flag for flag in DECLARATIVE_LOOP_FLAGS if getattr(plan, flag) != getattr(defaults, flag)
    ]
    if changed:
        raise CaseSetupError(
            "the case defines train_step, so the candidate runs that step, not the plan's "
            f"loop; leave {', '.join(changed)} at the default",
            field="candidate",
        )


def returned_loss_record(returned: object) -> dict[str, object] | None:
    """The loss-accounting record of what train_step returned, or None when it returned None.

    Each returned LossAccounting's `value` is the loss the step back-propagated
    for one microbatch (after whatever scaling the step applies), so
    `effective_loss` is their sum: the objective whose gradient the update
    used. With numerator and denominator on every term the record also holds
    their sums, like the reference's. Raises TypeError for anything other
    than None or a non-empty sequence of LossAccounting with tensor values.
    """
    if returned is None:
        return None
    import torch  # here, not at the top: the check's own process loads this module torch-free

    if isinstance(returned, (str, bytes)) or not isinstance(returned, Sequence):
        raise TypeError(
            "case.train_step() must return None or a sequence of LossAccounting "
            f"(one per microbatch it back-propagated), got {type(returned).__name__}"
        )
    if not returned:
        raise TypeError(
            "case.train_step() returned an empty sequence; return None when the step "
            "does not report its losses"
        )
    for index, term in enumerate(returned):
        if not isinstance(term, LossAccounting):
            raise TypeError(
                "case.train_step() must return None or a sequence of LossAccounting, "
                f"got {type(term).__name__} at index {index}"
            )
        if not isinstance(term.value, torch.Tensor):
            raise TypeError(
                f"LossAccounting.value at index {index} must be a torch.Tensor, "
                f"got {type(term.value).__name__}"
            )
    effective = _detached_sum([term.value for term in returned])
    supplied = [term.numerator is not None and term.denominator is not None for term in returned]
    if not all(supplied):
        if any(supplied):
            raise MixedAccounting()
        return {"effective_loss": effective, "normalization_captured": False}
    for index, term in enumerate(returned):
        if not isinstance(term.numerator, torch.Tensor):
            raise TypeError(
                f"LossAccounting.numerator at index {index} must be a torch.Tensor, "
                f"got {type(term.numerator).__name__}"
            )
    return {
        "effective_loss": effective,
        "numerator": _detached_sum([term.numerator for term in returned]),
        "denominator": float(sum(float(term.denominator) for term in returned)),  # type: ignore[arg-type]
        "normalization_captured": True,
    }


class MixedAccounting(ValueError):
    """Some but not all returned terms declare numerator and denominator (the check ABSTAINs)."""

    def __init__(self) -> None:
        super().__init__("loss accounting must be supplied for every microbatch or none")


def _detached_sum(tensors: list[torch.Tensor]) -> torch.Tensor:
    import torch

    # Same start and order as the reference's record: a 0-dim default-dtype zero, then each term.
    total = torch.zeros((), device=tensors[0].device)
    for tensor in tensors:
        total = total + tensor.detach()
    return total


class StepObserver:
    """Wraps `optimizer.step` and `scheduler.step` on the instances while a step runs.

    Counts both kinds of calls. With `observe`, the first optimizer step call
    freezes the gradients of `named_model` before delegating (the gradient
    phase) and every call's return freezes the optimizer state, keeping the
    last (the optimizer phase); `named_model` is the module whose parameter
    names the reference uses (the unwrapped model under DDP); `clipping`,
    when given, adds the clipping calls so far to the gradient phase. Captures are
    kept as CaptureResults: raising into the user's code is never an option.
    Restores the instances on exit, also when the step raised.
    """

    def __init__(
        self,
        optimizer: Any,
        scheduler: Any,
        named_model: torch.nn.Module,
        *,
        observe: bool,
        clipping: ClipRecorder | None = None,
    ) -> None:
        self.optimizer = optimizer
        self.clipping = clipping
        self.scheduler = scheduler
        self.named_model = named_model
        self.observe = observe
        self.optimizer_step_calls = 0
        self.scheduler_step_calls = 0
        self.gradient: CaptureResult | None = None
        self.optimizer_state: CaptureResult | None = None
        self._restore: list[Callable[[], None]] = []
        self._wrappers: dict[int, Callable[..., Any]] = {}

    def __enter__(self) -> StepObserver:
        self._wrap(self.optimizer, self._around_optimizer_step)
        if self.scheduler is not None:
            self._wrap(self.scheduler, self._around_scheduler_step)
        return self

    def __exit__(self, *exc_info: object) -> None:
        while self._restore:
            self._restore.pop()()

    def _wrap(self, owner: Any, around: Callable[..., Any]) -> None:
        # An instance attribute may already be there (LRScheduler patches optimizer.step
        # that way); it is put back as it was, else the class's method shows again.
        previous = vars(owner).get("step", _ABSENT)
        original = owner.step

        @functools.wraps(original)
        def step(*args: Any, **kwargs: Any) -> Any:
            return around(original, *args, **kwargs)

        owner.step = step
        self._wrappers[id(owner)] = step

        def restore() -> None:
            if previous is _ABSENT:
                del owner.step
            else:
                owner.step = previous

        self._restore.append(restore)

    def _around_optimizer_step(
        self, original: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        self.optimizer_step_calls += 1
        if self.observe and self.optimizer_step_calls == 1:
            self.gradient = self.capture_gradient()
        result = original(*args, **kwargs)
        if self.observe:
            self.optimizer_state = self.capture_optimizer_state()
        return result

    def _around_scheduler_step(
        self, original: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        self.scheduler_step_calls += 1
        return original(*args, **kwargs)

    def counted_scheduler_state(self) -> dict[str, object] | None:
        """The scheduler's `state_dict()` with `step_calls`; None without a scheduler.

        LRScheduler.state_dict() returns the instance's attributes, so the
        wrapper, while installed, is left out: it is ours, not the user's state.
        """
        if self.scheduler is None:
            return None
        state = dict(self.scheduler.state_dict())
        if state.get("step") is self._wrappers.get(id(self.scheduler), _ABSENT):
            del state["step"]
        state["step_calls"] = self.scheduler_step_calls
        return state

    def capture_gradient(self) -> CaptureResult:
        """The gradient phase now: every parameter's `.grad` by the reference's names, and the
        clipping calls so far."""
        from trainparity._internal.accumulation.step_probes import gradient_observation
        from trainparity._internal.state.snapshot_capture import capture_tree

        return capture_tree(
            lambda: gradient_observation(self.named_model, self.clipping), step=None
        )

    def capture_optimizer_state(self) -> CaptureResult:
        """The optimizer's canonical state now, without the call count (known only at the end)."""
        from trainparity._internal.state.snapshot_capture import (
            canonical_optimizer_state,
            capture_tree,
        )

        return capture_tree(
            lambda: {"optimizer": canonical_optimizer_state(self.optimizer, self.named_model)},
            step=None,
        )


_ABSENT = object()


def with_step_calls(root: FrozenMapping, section: str, calls: int) -> FrozenMapping:
    """`root` with `step_calls: calls` added to its `section` mapping (entries stay sorted)."""
    entries = dict(root.entries)
    inner = entries[section]
    if not isinstance(inner, FrozenMapping):
        raise TypeError(f"{section} observation is {type(inner).__name__}, not a mapping")
    entries[section] = FrozenMapping(tuple(sorted((*inner.entries, ("step_calls", calls)))))
    return FrozenMapping(tuple(sorted(entries.items())))
