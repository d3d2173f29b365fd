"""A tiny transformer classifier in a hand-written Accelerate loop: accumulation, clipping, EMA, save_state.

Usage: python accelerate_train.py --project-dir DIR --stop-at N [--model encoder|mlp] [--noisy]
[--fault NAME]

The way people write it: `ProjectConfiguration(automatic_checkpoint_naming=True)`,
`accelerator.save_state()` every 2 optimizer steps into
`<project>/checkpoints/checkpoint_<i>`, and `accelerator.load_state()` at the
start, which loads the newest of them when there is one. Everything else
the loop needs across a resume is registered with
`accelerator.register_for_checkpointing`: the step counter, the EMA of the
weights (whose decay warms up with its update count) and the shuffling
loader's generator state at the start of the epoch; the resumed epoch skips
its consumed batches with `accelerator.skip_first_batches`. Gradients
accumulate over 2 microbatches (`accelerator.accumulate`) and are clipped
at the sync step. `max_steps` (the LR schedule: warm-up, then cosine)
never changes; a job's slot ends at `--stop-at`.

Models: `encoder`, an embedding and one `TransformerEncoderLayer` (d=16,
LayerNorm, dropout 0.1), mean-pooled into 3 classes, AdamW; `mlp`, a
Linear/Tanh/Dropout MLP with a 1-output head, SGD with Nesterov momentum.
`trainparity.record()` runs after loading and after every optimizer step;
`trainparity.distributed.track_ids` records the sample IDs of the batches
trained on. `--noisy` multiplies each loss by 1 computed as a float32 sum in
an order drawn from os.urandom (real rounding differences, nothing added
to any state).

`--fault` (resume bugs): `ema-not-registered` (the EMA is not registered for
checkpointing: a resume restarts it), `scheduler-not-prepared` (the
scheduler is stepped by hand and never passed to `prepare`, so
`save_state` does not save it), `position-not-skipped` (the resumed epoch
starts at its first batch).
"""

import argparse
import math
import os
from pathlib import Path

import numpy
import torch
import trainparity
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed
from trainparity.distributed import track_ids

parser = argparse.ArgumentParser()
parser.add_argument("--project-dir", type=Path, required=True)
parser.add_argument("--stop-at", type=int, required=True)
parser.add_argument("--max-steps", type=int, default=8)
parser.add_argument("--model", choices=("encoder", "mlp"), default="encoder")
parser.add_argument("--noisy", action="store_true")
parser.add_argument(
    "--fault", choices=("ema-not-registered", "scheduler-not-prepared", "position-not-skipped")
)
options = parser.parse_args()

ACCUMULATION = 2
VOCAB, LENGTH = 32, 6
_ORDER = numpy.random.default_rng(int.from_bytes(os.urandom(8), "little"))
_TERMS = (
    torch.rand(1024, generator=torch.Generator().manual_seed(7)) * torch.logspace(-3, 3, 1024)
).numpy()
_TOTAL = numpy.float32(_TERMS.astype(numpy.float64).sum())


def one_summed_in_random_order() -> float:
    """1, up to the rounding of a sequential float32 sum whose order is drawn per call."""
    return float(numpy.add.accumulate(_TERMS[_ORDER.permutation(len(_TERMS))])[-1] / _TOTAL)


class Encoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = torch.nn.Embedding(VOCAB, 16)
        self.layer = torch.nn.TransformerEncoderLayer(
            16, nhead=2, dim_feedforward=32, dropout=0.1, batch_first=True
        )
        self.head = torch.nn.Linear(16, 3)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embedding(tokens)).mean(dim=1))


class Progress:
    """Optimizer steps taken (custom_checkpoint_0.pkl)."""

    def __init__(self) -> None:
        self.step = 0

    def state_dict(self) -> dict:
        return {"step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.step = state["step"]


class EpochOrder:
    """The shuffling generator's state when the current epoch began: that epoch's order."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self.epoch = 0
        self.start = generator.get_state()

    def begin(self, epoch: int, resumed: bool) -> None:
        if resumed:
            self.generator.set_state(self.start)
        else:
            self.epoch, self.start = epoch, self.generator.get_state()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "start": self.start, "now": self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.start = state["epoch"], state["start"]
        self.generator.set_state(state["now"])  # a resume at an epoch's end draws on from here


class EMA:
    """An exponential moving average of the weights; the decay warms up with the update count."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
        self.updates = 0

    @torch.no_grad()
    def update(self, model: torch.nn.Module) -> None:
        self.updates += 1
        decay = min(0.99, (1 + self.updates) / (10 + self.updates))
        for name, value in model.state_dict().items():
            self.weights[name].mul_(decay).add_(value, alpha=1 - decay)

    def state_dict(self) -> dict:
        return {"weights": self.weights, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.weights = {name: value.clone() for name, value in state["weights"].items()}
        self.updates = state["updates"]


def dataset() -> list:
    generator = torch.Generator().manual_seed(0)
    if options.model == "encoder":
        tokens = torch.randint(VOCAB, (48, LENGTH), generator=generator)
        labels = tokens[:, 0] % 3
        return [(index, tokens[index], labels[index]) for index in range(48)]
    inputs = torch.randn(48, 6, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True).sin()
    return [(index, inputs[index], targets[index]) for index in range(48)]


def main() -> None:
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=ACCUMULATION,
        project_config=ProjectConfiguration(
            project_dir=str(options.project_dir), automatic_checkpoint_naming=True
        ),
    )
    set_seed(0)
    if options.model == "encoder":
        model = Encoder()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    else:
        model = torch.nn.Sequential(
            torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1)
        )
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)

    def warmup_cosine(step: int) -> float:
        if step < 2:
            return (step + 1) / 2
        return 0.5 * (1 + math.cos(math.pi * (step - 2) / (options.max_steps - 2)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine)
    ema = EMA(model)
    progress = Progress()
    shuffling = torch.Generator().manual_seed(1)
    order = EpochOrder(shuffling)
    # 48 samples in batches of 4, 2 batches a step: 6 steps an epoch (a split at 4 is mid-epoch).
    loader = torch.utils.data.DataLoader(dataset(), batch_size=4, shuffle=True, generator=shuffling)
    accelerator.register_for_checkpointing(progress, order)
    if options.fault != "ema-not-registered":
        accelerator.register_for_checkpointing(ema)
    if options.fault == "scheduler-not-prepared":
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    else:
        model, optimizer, loader, scheduler = accelerator.prepare(
            model, optimizer, loader, scheduler
        )

    checkpoints = options.project_dir / "checkpoints"
    saved = sorted(int(folder.name.split("_")[1]) for folder in checkpoints.glob("checkpoint_*"))
    resumed = bool(saved)
    if resumed:
        accelerator.load_state()  # the newest checkpoint_<i>
        # load_state does not move the automatic naming on: the next save_state would
        # find checkpoint_0 taken.
        accelerator.project_configuration.iteration = saved[-1] + 1
    trainparity.record(progress.step, observed(model, optimizer, scheduler, ema, progress))

    batches_per_epoch = len(loader)
    while progress.step < options.stop_at:
        epoch, consumed = divmod(progress.step * ACCUMULATION, batches_per_epoch)
        order.begin(epoch, resumed=resumed and consumed > 0)
        resumed = False
        if options.fault == "position-not-skipped":
            consumed = 0
        batches = accelerator.skip_first_batches(loader, consumed) if consumed else loader
        for _ids, inputs, targets in track_ids(batches, id_of=lambda b: b[0], epoch=epoch):
            with accelerator.accumulate(model):
                prediction = model(inputs)
                if options.model == "encoder":
                    loss = torch.nn.functional.cross_entropy(prediction, targets)
                else:
                    loss = torch.nn.functional.mse_loss(prediction, targets)
                if options.noisy:
                    loss = loss * one_summed_in_random_order()
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                if options.fault != "scheduler-not-prepared" or accelerator.sync_gradients:
                    scheduler.step()
                optimizer.zero_grad()
            if not accelerator.sync_gradients:
                continue
            progress.step += 1
            ema.update(accelerator.unwrap_model(model))
            trainparity.record(progress.step, observed(model, optimizer, scheduler, ema, progress))
            if progress.step % 2 == 0:
                accelerator.save_state()  # checkpoints/checkpoint_<i>, i counting the saves
            if progress.step >= options.stop_at:
                break


def observed(model, optimizer, scheduler, ema, progress) -> dict:
    return {
        "model": model.state_dict(),
        "model_ema": ema.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "step": progress.step,
    }


if __name__ == "__main__":
    main()
