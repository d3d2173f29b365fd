"""Small models trained with Lightning, checkpointing every 2 steps and resuming with ckpt_path="last".

Usage: python lightning_train.py --root-dir DIR --stop-at N [--model cnn|mlp] [--noisy] [--fault NAME]

The way people write it: `ModelCheckpoint(dirpath=..., every_n_train_steps=2,
save_last=True)` and `trainer.fit(model, loader, ckpt_path="last")`, which
resumes from `last.ckpt` when there is one. `max_steps` (the whole LR
schedule) never changes; a job's slot ends at `--stop-at`, where a callback
stops the fit after ModelCheckpoint saved.

Lightning saves no RNG state, so the script keeps its own in a stateful
callback (`RngState`), and its shuffling loader (`ResumableLoader`) tells
Lightning its epoch's generator state and position, so a resume continues
mid-epoch. Models, built from a fixed seed:

- `cnn`: Conv2d, BatchNorm2d (its 1-element `num_batches_tracked`),
  dropout, SGD with momentum and a step-wise MultiStepLR, and an EMA of the
  weights kept by a callback whose decay warms up with its update count.
- `mlp`: Linear, LayerNorm, GELU, dropout, a 1-output head (a 1-element
  bias); AdamW with a step-wise OneCycleLR.

`trainparity.record()` runs when the fit starts (after the checkpoint was
restored) and after every optimizer step. `--noisy` multiplies each loss by
1 computed as a float32 sum in an order drawn from os.urandom (real
rounding differences from run to run, nothing added to any state).

`--fault` (resume bugs): `ema-counter-not-saved` (the EMA callback's
state_dict holds the weights but not the update count), `rng-not-restored`
(the RNG callback saves, its load_state_dict restores nothing),
`plain-loader` (a plain shuffled DataLoader: the resumed epoch starts over).
"""

import argparse
import os
from pathlib import Path

import lightning as L
import numpy
import torch
import trainparity
from lightning.pytorch.callbacks import ModelCheckpoint

parser = argparse.ArgumentParser()
parser.add_argument("--root-dir", type=Path, required=True)
parser.add_argument("--stop-at", type=int, required=True)
parser.add_argument("--max-steps", type=int, default=8)
parser.add_argument("--model", choices=("cnn", "mlp"), default="cnn")
parser.add_argument("--noisy", action="store_true")
parser.add_argument(
    "--fault", choices=("ema-counter-not-saved", "rng-not-restored", "plain-loader")
)
options = parser.parse_args()

_ORDER = numpy.random.default_rng(int.from_bytes(os.urandom(8), "little"))
_TERMS = (
    torch.rand(1024, generator=torch.Generator().manual_seed(7)) * torch.logspace(-3, 3, 1024)
).numpy()
_TOTAL = numpy.float32(_TERMS.astype(numpy.float64).sum())


def one_summed_in_random_order() -> float:
    """1, up to the rounding of a sequential float32 sum whose order is drawn per call."""
    return float(numpy.add.accumulate(_TERMS[_ORDER.permutation(len(_TERMS))])[-1] / _TOTAL)


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        if options.model == "cnn":
            self.net = torch.nn.Sequential(
                torch.nn.Conv2d(1, 4, 3),
                torch.nn.BatchNorm2d(4),
                torch.nn.ReLU(),
                torch.nn.Dropout(0.1),
                torch.nn.Flatten(),
                torch.nn.Linear(4 * 4 * 4, 3),
            )
        else:
            self.net = torch.nn.Sequential(
                torch.nn.Linear(8, 32),
                torch.nn.LayerNorm(32),
                torch.nn.GELU(),
                torch.nn.Dropout(0.1),
                torch.nn.Linear(32, 1),
            )

    def training_step(self, batch, batch_idx):
        inputs, targets = batch
        if options.model == "cnn":
            loss = torch.nn.functional.cross_entropy(self.net(inputs), targets)
        else:
            loss = torch.nn.functional.mse_loss(self.net(inputs).squeeze(1), targets)
        return loss * one_summed_in_random_order() if options.noisy else loss

    def configure_optimizers(self):
        if options.model == "cnn":
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
            schedule = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[3, 6], gamma=0.5)
        else:
            optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.01)
            schedule = torch.optim.lr_scheduler.OneCycleLR(
                optimizer, max_lr=3e-2, total_steps=options.max_steps
            )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class ResumableLoader(torch.utils.data.DataLoader):
    """A shuffling loader that saves its epoch's generator state and position; resumes mid-epoch."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.position = 0
        self.epoch_start = self.generator.get_state()
        self.resume_position = 0

    def __iter__(self):
        skip, self.resume_position = self.resume_position, 0
        if skip:
            self.generator.set_state(self.epoch_start)
        else:
            self.epoch_start = self.generator.get_state()
        self.position = skip
        for index, batch in enumerate(super().__iter__()):
            if index >= skip:
                self.position = index + 1
                yield batch

    def state_dict(self) -> dict:
        return {"position": self.position, "epoch_start": self.epoch_start}

    def load_state_dict(self, state: dict) -> None:
        self.resume_position = state["position"]
        self.epoch_start = state["epoch_start"]


class EMA(L.Callback):
    """An exponential moving average of the weights; its decay warms up with the update count."""

    def __init__(self) -> None:
        self.weights: dict[str, torch.Tensor] = {}
        self.updates = 0

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.updates += 1
        decay = min(0.99, (1 + self.updates) / (10 + self.updates))
        with torch.no_grad():
            for name, value in module.state_dict().items():
                if name not in self.weights:
                    self.weights[name] = value.detach().clone()
                elif value.is_floating_point():
                    self.weights[name].mul_(decay).add_(value, alpha=1 - decay)
                else:
                    self.weights[name].copy_(value)

    def state_dict(self) -> dict:
        if options.fault == "ema-counter-not-saved":
            return {"weights": self.weights}
        return {"weights": self.weights, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.weights = {name: value.clone() for name, value in state["weights"].items()}
        self.updates = state.get("updates", 0)


class RngState(L.Callback):
    """Lightning saves no RNG state: this callback's state is torch's global generator."""

    def state_dict(self) -> dict:
        return {"torch": torch.get_rng_state()}

    def load_state_dict(self, state: dict) -> None:
        if options.fault != "rng-not-restored":
            torch.set_rng_state(state["torch"])


class StopAt(L.Callback):
    """The job's slot ends after step `stop_at` (ModelCheckpoint saves there: a multiple of 2)."""

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= options.stop_at:
            trainer.should_stop = True


class Record(L.Callback):
    """trainparity.record() when the fit starts (after restoring) and after every step."""

    def __init__(self, ema: EMA | None) -> None:
        self.ema = ema

    def on_train_start(self, trainer, module) -> None:
        trainparity.record(trainer.global_step, self.observed(trainer, module))

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        trainparity.record(trainer.global_step, self.observed(trainer, module))

    def observed(self, trainer, module) -> dict:
        state = {
            "model": module.state_dict(),
            "optimizers": [optimizer.state_dict() for optimizer in trainer.optimizers],
            "schedulers": [
                config.scheduler.state_dict() for config in trainer.lr_scheduler_configs
            ],
        }
        if self.ema is not None:
            state["model_ema"] = self.ema.state_dict()
        return state


def dataset() -> list:
    generator = torch.Generator().manual_seed(0)
    if options.model == "cnn":
        images = torch.randn(40, 1, 6, 6, generator=generator)
        labels = (images.mean(dim=(1, 2, 3)) > 0).long() + (images[:, 0, 0, 0] > 1).long()
        return list(zip(images, labels, strict=True))
    inputs = torch.randn(40, 8, generator=generator)
    return list(zip(inputs, inputs.sum(dim=1).sin(), strict=True))


def main() -> None:
    L.seed_everything(0, verbose=False)
    generator = torch.Generator().manual_seed(1)
    loader_class = (
        torch.utils.data.DataLoader if options.fault == "plain-loader" else ResumableLoader
    )
    # 40 samples in batches of 4: 10 steps an epoch, so a split at step 4 is mid-epoch.
    loader = loader_class(dataset(), batch_size=4, shuffle=True, generator=generator)
    ema = EMA() if options.model == "cnn" else None
    checkpoints = ModelCheckpoint(
        dirpath=options.root_dir / "checkpoints",
        every_n_train_steps=2,
        save_top_k=-1,
        save_last=True,
    )
    callbacks = [RngState(), *([ema] if ema else []), StopAt(), Record(ema), checkpoints]
    trainer = L.Trainer(
        max_steps=options.max_steps,
        default_root_dir=options.root_dir,
        callbacks=callbacks,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    # Auto-resume: last.ckpt in the ModelCheckpoint's dirpath when there is one (a warning and
    # a fresh start otherwise).
    trainer.fit(Classifier(), loader, ckpt_path="last")


if __name__ == "__main__":
    main()
