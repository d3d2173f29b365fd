"""One optimizer-update boundary as the accumulation worker executes it, with its observations.

`Boundary` runs the declared plan's loop (docs/compatibility.md, "check_accumulation") and accounts for its
microbatch losses (§7.6); `OwnStepBoundary` runs the case's own `train_step`
and observes it from outside, and `RankBoundary` runs one rank of a
multi-rank candidate under DDP. A run that cannot PASS ends early with
`Stop`; worker.py turns that, or a `CaseMethodError`, into its result record.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from trainparity._internal.accumulation.plan import (
    INITIAL_KEY,
    PHASES,
    RANKS_KEY,
    AccumulationExecutionPlan,
    UnsafeBatchSplit,
    split_for_case,
)
from trainparity._internal.accumulation.ranks import RankContext, plan_train_step
from trainparity._internal.accumulation.step_probes import (
    ClipRecorder,
    RandomDraws,
    gradient_observation,
    random_modules,
)
from trainparity._internal.accumulation.user_step import (
    TRAIN_STEP,
    MixedAccounting,
    StepObserver,
    returned_loss_record,
    with_step_calls,
)
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.protocols import LossAccounting, TrainingState
from trainparity._internal.state.freeze import FrozenMapping
from trainparity._internal.state.snapshot_capture import (
    CaptureResult,
    canonical_optimizer_state,
    capture_snapshot,
    capture_tree,
    parameter_and_buffer_trees,
    state_dict_or_none,
)
from trainparity._internal.state.snapshot_file import write_snapshot

__all__ = [
    "OBSERVED_STEP",
    "Boundary",
    "CaseMethodError",
    "OwnStepBoundary",
    "RankBoundary",
    "Stop",
    "account_losses",
    "call_case",
]

OBSERVED_STEP = 1


class Stop(Exception):
    """Ends the run early with a verdict other than PASS."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


class CaseMethodError(Exception):
    """A method of the user's case raised; keeps which one, for the message."""

    def __init__(self, method: str, error: Exception) -> None:
        super().__init__(method)
        self.method = method
        self.error = error


def call_case(case: Any, method: str, *arguments: Any) -> Any:
    try:
        return getattr(case, method)(*arguments)
    except UnsafeBatchSplit:
        raise
    except Exception as error:
        raise CaseMethodError(method, error) from error


def account_losses(
    terms: list[LossAccounting], plan: AccumulationExecutionPlan
) -> tuple[list[torch.Tensor], dict[str, object]]:
    """The losses to back-propagate and the loss-accounting record (docs/compatibility.md, "check_accumulation")."""
    supplied = [term.numerator is not None and term.denominator is not None for term in terms]
    if any(supplied) and not all(supplied):
        raise Stop(Outcome.ABSTAIN, "loss accounting must be supplied for every microbatch or none")
    if all(supplied) and plan.use_explicit_loss_accounting:
        for term in terms:
            _require_tensor(term.numerator, "numerator")
        denominators = [float(term.denominator) for term in terms]  # type: ignore[arg-type]
        if not all(denominator > 0 for denominator in denominators):
            raise Stop(Outcome.ABSTAIN, "loss denominators must be positive")
        total_denominator = sum(denominators)
        losses = [term.numerator / total_denominator for term in terms]
        numerator = _detached_sum([term.numerator for term in terms], losses[0].device)
        return losses, {
            "effective_loss": numerator / total_denominator,
            "numerator": numerator,
            "denominator": total_denominator,
            "normalization_captured": True,
        }
    for term in terms:
        _require_tensor(term.value, "value")
    divisor = len(terms) if plan.scale_accumulated_loss else 1
    losses = [term.value / divisor for term in terms]
    return losses, {
        "effective_loss": _detached_sum(losses, losses[0].device),
        "normalization_captured": False,
    }


def _detached_sum(tensors: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    total = torch.zeros((), device=device)
    for tensor in tensors:
        total = total + tensor.detach()
    return total


def _require_tensor(value: object, field: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(
            f"LossAccounting.{field} must be a torch.Tensor (part of the autograd graph), "
            f"got {type(value).__name__}"
        )


def _step_scheduler(scheduler: Any, loss: object) -> None:
    """One scheduler step; ReduceLROnPlateau's takes a metric: the loss the update used."""
    if isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
        scheduler.step(float(loss))  # type: ignore[arg-type]
    else:
        scheduler.step()


def _has(owner: object, method: str) -> bool:
    return owner is not None and callable(getattr(owner, method, None))


class Boundary:
    """One plan executed for one optimizer-update boundary, with its observations."""

    def __init__(
        self,
        case: Any,
        plan: AccumulationExecutionPlan,
        state: TrainingState,
        *,
        count_steps: bool = False,
    ) -> None:
        self.case = case
        self.plan = plan
        self.state = state
        self.observations: dict[str, FrozenMapping] = {}
        self.unobserved: list[str] = []
        self.loss_normalization_captured = False
        # In a check of a case with its own train_step every child counts step calls,
        # so the reference's counts stand beside the user's.
        self.count_steps = count_steps
        self.where = ""
        # Recorded where the candidate is the case's own step (as its step counts are).
        self.clipping = ClipRecorder() if count_steps else None
        self.draws = RandomDraws()
        # Dropout-family modules in training mode and whether the generators moved (worker.py).
        self.random_draws: dict[str, object] = {"drew": False, "modules": []}
        self.counter = (
            StepObserver(
                state.optimizer, state.scheduler, state.model, observe=False, clipping=self.clipping
            )
            if count_steps
            else None
        )

    def run(self, device: str) -> None:
        microbatches = self._begin(device)
        with self.clipping or contextlib.nullcontext():
            if self.counter is None:
                self._plan_loop(microbatches)
            else:
                with self.counter:
                    self._plan_loop(microbatches)
        self._note_random_draws(self.state.model)

    def _note_random_draws(self, model: torch.nn.Module) -> None:
        self.random_draws = {"drew": self.draws.drew(), "modules": random_modules(model)}

    def _begin(self, device: str) -> list[object]:
        """Capture the initial state, then fetch and split the batch (docs/compatibility.md, "check_accumulation")."""
        state, plan = self.state, self.plan
        initial = capture_snapshot(
            state.model,
            step=0,
            optimizer=state.optimizer,
            scheduler=state.scheduler,
            scaler=state.scaler,
        )
        if initial.outcome is not Outcome.PASS:
            raise Stop(initial.outcome, f"initial state capture failed: {initial.issue.detail}")  # type: ignore[union-attr]
        self.observations[INITIAL_KEY] = initial.snapshot.state  # type: ignore[union-attr]
        batch = call_case(self.case, "batch", device)
        microbatches = split_for_case(self.case, batch, plan.microbatch_count)
        if plan.omit_final_microbatch:
            microbatches = microbatches[:-1]
        if not microbatches:
            raise Stop(Outcome.ABSTAIN, "plan consumed no microbatches")
        self.draws.start()  # after batch(): drawing the batch itself is the same for every child
        return microbatches

    def _plan_loop(self, microbatches: list[object]) -> None:
        """The declared plan's loop and its observations (docs/compatibility.md, "check_accumulation")."""
        state, plan = self.state, self.plan
        scaler = state.scaler
        state.optimizer.zero_grad(set_to_none=True)
        # Every loss is computed before any backward, as the original does (docs/compatibility.md, "check_accumulation").
        terms = [self._loss(microbatch) for microbatch in microbatches]
        losses, record = account_losses(terms, plan)
        self.loss_normalization_captured = bool(record["normalization_captured"])
        for loss in losses:
            self._backward(loss)
            if plan.clip_per_microbatch and plan.clip_grad_norm is not None:
                self._clip()
            if plan.optimizer_step_per_microbatch:
                self._step_per_microbatch()
                state.optimizer.zero_grad(set_to_none=True)
            if plan.scheduler_step_per_microbatch and state.scheduler is not None:
                _step_scheduler(state.scheduler, record["effective_loss"])
        if (
            _has(scaler, "unscale_")
            and not plan.optimizer_step_per_microbatch
            and not plan.amp_step_before_unscale
        ):
            scaler.unscale_(state.optimizer)
        if plan.clip_grad_norm is not None and not plan.clip_per_microbatch:
            self._clip()
        if plan.zero_grad_before_gradient_observation:
            state.optimizer.zero_grad(set_to_none=True)
        self._observe("loss_accounting", lambda: {"loss_accounting": record})
        self._observe("gradient", lambda: gradient_observation(state.model, self.clipping))
        if not plan.optimizer_step_per_microbatch:
            self._step_at_boundary()
        self._observe(
            "optimizer_state",
            lambda: {"optimizer": self._counted_optimizer_state()},
        )
        self._observe("parameter_update", lambda: parameter_and_buffer_trees(state.model))
        if state.scheduler is not None and not plan.scheduler_step_per_microbatch:
            _step_scheduler(state.scheduler, record["effective_loss"])
        self._observe("scheduler_state", self._scheduler_and_scaler)

    def _counted_optimizer_state(self) -> dict[str, object]:
        canonical = canonical_optimizer_state(self.state.optimizer, self.state.model)
        if self.counter is not None:
            canonical["step_calls"] = self.counter.optimizer_step_calls
        return canonical

    def _scheduler_and_scaler(self) -> dict[str, object]:
        scheduler = (
            self.counter.counted_scheduler_state()
            if self.count_steps and self.counter is not None
            else state_dict_or_none(self.state.scheduler)
        )
        return {"scheduler": scheduler, "scaler": state_dict_or_none(self.state.scaler)}

    def _loss(self, microbatch: object) -> LossAccounting:
        term = call_case(self.case, "loss", self.state, microbatch)
        if not isinstance(term, LossAccounting):
            raise TypeError(
                f"case.loss() must return a trainparity LossAccounting, got {type(term).__name__}"
            )
        return term

    def _backward(self, loss: torch.Tensor) -> None:
        scaler = self.state.scaler
        (scaler.scale(loss) if _has(scaler, "scale") else loss).backward()

    def _clip(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.state.model.parameters(), self.plan.clip_grad_norm)

    def _scaler_steps(self) -> bool:
        scaler = self.state.scaler
        return (
            _has(scaler, "step")
            and _has(scaler, "update")
            and not self.plan.amp_step_before_unscale
        )

    def _step_per_microbatch(self) -> None:
        if self._scaler_steps():
            self.state.scaler.step(self.state.optimizer)
            self.state.scaler.update()
        else:
            self.state.optimizer.step()

    def _step_at_boundary(self) -> None:
        scaler = self.state.scaler
        if self._scaler_steps():
            scaler.step(self.state.optimizer)
            scaler.update()
            return
        self.state.optimizer.step()
        if self.plan.amp_step_before_unscale and _has(scaler, "update"):
            scaler.update(new_scale=scaler.get_scale())

    def _observe(self, phase: str, build: Callable[[], Mapping[str, object]]) -> None:
        self._keep(phase, capture_tree(build, step=OBSERVED_STEP))

    def _keep(self, phase: str, captured: CaptureResult) -> None:
        if captured.outcome is Outcome.ABSTAIN:
            raise Stop(Outcome.ABSTAIN, f"{phase} state capture failed: {captured.issue.detail}")  # type: ignore[union-attr]
        if captured.outcome is not Outcome.PASS:
            raise Stop(Outcome.ERROR, f"worker failed: {captured.issue.detail}")  # type: ignore[union-attr]
        self.observations[phase] = captured.snapshot.state  # type: ignore[union-attr]

    def write(self, path: Path) -> None:
        entries = tuple(sorted(self.observations.items()))
        observed = [phase for phase in PHASES if phase not in self.unobserved]
        extra = [RANKS_KEY] if RANKS_KEY in self.observations else []
        assert [key for key, _ in entries] == sorted((INITIAL_KEY, *observed, *extra))
        # Fingerprinted after the run, so flags the case set while building show.
        write_snapshot(
            path, FrozenMapping(entries), step=OBSERVED_STEP, environment=environment_fingerprint()
        )


class OwnStepBoundary(Boundary):
    """The case's own train_step for one optimizer-update boundary, observed from outside.

    Phases: `loss_accounting` from what the step returned (unobserved when it
    returned None), `gradient` when it first called `optimizer.step`,
    `optimizer_state` when its last `optimizer.step` returned (both when it
    returned, if it never stepped), `parameter_update` and `scheduler_state`
    when it returned; the optimizer and scheduler observations carry their
    `step_calls`.
    """

    def run(self, device: str) -> None:
        microbatches = self._begin(device)
        self._run_step(
            lambda state, parts: call_case(self.case, TRAIN_STEP, state, parts),
            self.state,
            microbatches,
            self.state.model,
        )

    def _run_step(
        self,
        step: Callable[[TrainingState, list[object]], object],
        step_state: TrainingState,
        microbatches: list[object],
        named_model: torch.nn.Module,
    ) -> None:
        """Run `step` under the observer; `named_model` carries the reference's parameter names."""
        observer = self.counter = StepObserver(
            step_state.optimizer,
            step_state.scheduler,
            named_model,
            observe=True,
            clipping=self.clipping,
        )
        with self.clipping or contextlib.nullcontext(), observer:
            returned = step(step_state, microbatches)
        self._note_random_draws(step_state.model)
        try:
            record = returned_loss_record(returned)
        except MixedAccounting as error:
            raise Stop(Outcome.ABSTAIN, str(error)) from None
        except TypeError as error:
            raise Stop(
                Outcome.ERROR,
                f"worker failed: {error_text(error)} (returned by case.{TRAIN_STEP}(){self.where})",
            ) from None
        record = self._combined(record)
        if record is None:
            self.unobserved.append("loss_accounting")
        else:
            self.loss_normalization_captured = bool(record["normalization_captured"])
            self._observe("loss_accounting", lambda: {"loss_accounting": record})
        # A step that never called optimizer.step is observed as it left things: its
        # optimizer phase then shows step_calls 0 (a FAIL, not an ERROR).
        self._keep("gradient", observer.gradient or observer.capture_gradient())
        self._keep(
            "optimizer_state", observer.optimizer_state or observer.capture_optimizer_state()
        )
        if self.count_steps:  # our DDP loop for a plan counts nothing the reference would not
            self.observations["optimizer_state"] = with_step_calls(
                self.observations["optimizer_state"], "optimizer", observer.optimizer_step_calls
            )
        self._observe("parameter_update", lambda: parameter_and_buffer_trees(named_model))
        self._observe("scheduler_state", self._scheduler_and_scaler)

    def _combined(self, record: dict[str, object] | None) -> dict[str, object] | None:
        return record


class RankBoundary(OwnStepBoundary):
    """One rank of a multi-rank candidate: its share of the microbatches, under DDP.

    Runs the case's train_step (`own_step`) or our DDP loop with the plan's
    multi-rank faults; the loss record is combined over all ranks, and the
    rank's gradient synchronisations are observed under `ranks`.
    """

    def __init__(
        self, *arguments: Any, own_step: bool, context: RankContext, **options: Any
    ) -> None:
        super().__init__(*arguments, **options)
        self.own_step = own_step
        self.context = context

    def run(self, device: str) -> None:
        context = self.context
        microbatches = self._begin(context.device)
        wrapped, named = context.wrap(self.state.model)
        step_state = dataclasses.replace(self.state, model=wrapped)
        step = (
            (lambda state, parts: call_case(self.case, TRAIN_STEP, state, parts))
            if self.own_step
            else plan_train_step(self.case, self.plan, context)
        )
        self._run_step(step, step_state, context.share(microbatches), named)
        self._observe(RANKS_KEY, lambda: {"gradient_syncs": context.gradient_syncs})
        context.close()

    def _combined(self, record: dict[str, object] | None) -> dict[str, object] | None:
        return self.context.combined_loss_record(record)
