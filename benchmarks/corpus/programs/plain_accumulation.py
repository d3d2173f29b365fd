"""Accumulation cases for check_accumulation: one optimizer update written as users write it.

Each case uses a model of plain_train.py and brings its own `train_step` (the
loop over microbatches that a trainer runs), returning the loss terms it
back-propagated (docs/accumulation.md). The `Noisy*` twins multiply every loss
by plain_train's sum in an order drawn from os.urandom: rounding then changes
from run to run, and the corpus judges them with NoiseComparison.
"""

from __future__ import annotations

import torch
from torch import nn
from trainparity.protocols import LossAccounting, TrainingState

from benchmarks.corpus.programs.plain_train import (
    BATCH,
    build_model,
    build_optimizer,
    build_scheduler,
    reordered_sum,
)

CLIP = 0.5  # small enough that it clips on every update here


class TransformerAdamWClip:
    """A small transformer, AdamW, warmup then cosine, clipping: the mean loss over 2 microbatches."""

    equivalence = "same ordered samples; loss is the mean over the window's samples"
    model_kind = "transformer"
    optimizer_kind = "adamw"
    scheduler_kind = "sequential"
    noisy = False

    def build(self, seed: int, device: str) -> TrainingState:
        torch.manual_seed(seed)
        # Dropout off: its masks depend on the batch's shape, so microbatches cannot match.
        model = build_model(self.model_kind, dropout=0.0).to(device)
        optimizer = build_optimizer(self.optimizer_kind, model)
        return TrainingState(model, optimizer, build_scheduler(self.scheduler_kind, optimizer))

    def batch(self, device: str):
        generator = torch.Generator().manual_seed(3)
        if self.model_kind == "transformer":
            inputs = torch.randint(1, 16, (2 * BATCH, 6), generator=generator)
        else:
            inputs = torch.randn(2 * BATCH, 8, generator=generator)
        targets = torch.randint(0, 4, (2 * BATCH,), generator=generator)
        return inputs.to(device), targets.to(device)

    def split_batch(self, batch, count: int):
        inputs, targets = batch
        return list(zip(inputs.chunk(count), targets.chunk(count), strict=True))

    def mean_loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor):
        loss = nn.functional.cross_entropy(model(inputs), targets)
        return loss * reordered_sum() if self.noisy else loss

    def loss(self, state: TrainingState, batch) -> LossAccounting:
        inputs, targets = batch
        return LossAccounting(value=self.mean_loss(state.model, inputs, targets))

    def scale(self, loss: torch.Tensor, count: int) -> torch.Tensor:
        return loss / count

    def train_step(self, state: TrainingState, microbatches: list) -> list[LossAccounting]:
        state.optimizer.zero_grad(set_to_none=True)
        terms = []
        for inputs, targets in microbatches:
            loss = self.scale(self.mean_loss(state.model, inputs, targets), len(microbatches))
            loss.backward()
            terms.append(LossAccounting(value=loss.detach()))
        nn.utils.clip_grad_norm_(state.model.parameters(), CLIP)
        state.optimizer.step()
        state.scheduler.step()
        return terms


class MlpSgdMultiStep(TransformerAdamWClip):
    """An MLP with LayerNorm, SGD with momentum, MultiStepLR, clipping."""

    model_kind = "mlp"
    optimizer_kind = "sgd"
    scheduler_kind = "multistep"


class MlpScalerClip(MlpSgdMultiStep):
    """fp16 autocast on CPU with a GradScaler: unscale, then clip, then the scaler's step."""

    def build(self, seed: int, device: str) -> TrainingState:
        state = super().build(seed, device)
        state.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        return state

    def mean_loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor):
        with torch.autocast("cpu", dtype=torch.float16):
            outputs = model(inputs)
        loss = nn.functional.cross_entropy(outputs.float(), targets)
        return loss * reordered_sum() if self.noisy else loss

    def clip(self, state: TrainingState) -> None:
        state.scaler.unscale_(state.optimizer)
        nn.utils.clip_grad_norm_(state.model.parameters(), CLIP)

    def train_step(self, state: TrainingState, microbatches: list) -> list[LossAccounting]:
        state.optimizer.zero_grad(set_to_none=True)
        terms = []
        for inputs, targets in microbatches:
            loss = self.mean_loss(state.model, inputs, targets) / len(microbatches)
            state.scaler.scale(loss).backward()
            terms.append(LossAccounting(value=loss.detach()))
        self.clip(state)
        state.scaler.step(state.optimizer)
        state.scaler.update()
        state.scheduler.step()
        return terms


class TransformerLossNotDivided(TransformerAdamWClip):
    """Fault: each microbatch's mean loss is back-propagated as it is, not divided by the count."""

    def scale(self, loss: torch.Tensor, count: int) -> torch.Tensor:
        return loss


class MlpLossNotDivided(MlpSgdMultiStep):
    """Fault: each microbatch's mean loss is back-propagated as it is, not divided by the count."""

    def scale(self, loss: torch.Tensor, count: int) -> torch.Tensor:
        return loss


class MlpClipBeforeUnscale(MlpScalerClip):
    """Fault: the gradients are clipped while still multiplied by the loss scale."""

    def clip(self, state: TrainingState) -> None:
        nn.utils.clip_grad_norm_(state.model.parameters(), CLIP)
        state.scaler.unscale_(state.optimizer)


class MlpClipAfterStep(MlpSgdMultiStep):
    """Fault: the gradients are clipped after the optimizer has already stepped on them."""

    def train_step(self, state: TrainingState, microbatches: list) -> list[LossAccounting]:
        state.optimizer.zero_grad(set_to_none=True)
        terms = []
        for inputs, targets in microbatches:
            loss = self.mean_loss(state.model, inputs, targets) / len(microbatches)
            loss.backward()
            terms.append(LossAccounting(value=loss.detach()))
        state.optimizer.step()
        nn.utils.clip_grad_norm_(state.model.parameters(), CLIP)
        state.scheduler.step()
        return terms


def noisy(case: type) -> type:
    """The same case, its loss multiplied by a sum in an order drawn per run."""
    return type(f"Noisy{case.__name__}", (case,), {"noisy": True, "__module__": __name__})


NoisyTransformerAdamWClip = noisy(TransformerAdamWClip)
NoisyMlpSgdMultiStep = noisy(MlpSgdMultiStep)
NoisyMlpScalerClip = noisy(MlpScalerClip)
NoisyMlpLossNotDivided = noisy(MlpLossNotDivided)
NoisyMlpClipAfterStep = noisy(MlpClipAfterStep)
