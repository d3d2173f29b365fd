"""A plain PyTorch training script with checkpoints and resume, as people write them.

One script, many programs: the flags pick the model (an MLP with LayerNorm, a
small transformer, a CNN with BatchNorm, an MLP with 1-element tensors), the
optimizer, the schedule, the loader and how a resume skips the batches the
interrupted run already trained on, accumulation with clipping, an EMA of the
weights, autocast and `torch.compile`. Every part is what a user writes; the
corpus (benchmarks/corpus/programs/plain.py) runs it under trainparity's checks.

`--noisy` makes rounding change from run to run for real: the loss is
multiplied by a sum of 4,096 fixed numbers added in an order drawn from
os.urandom, as GPU atomics add in the order threads finish.

`--fault NAME` plants one real-world resume bug (see FAULTS).

Usage: python plain_train.py --checkpoint PATH --end-step N [--resume PATH] [options]
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import random
from pathlib import Path

import torch
import trainparity
from torch import nn
from torch.utils.data import DataLoader, Dataset

SEED = 11
SAMPLES = 16
BATCH = 4
SCHEDULE_STEPS = 8  # every schedule is laid out for 8 steps, whatever the run's end step
CLASSES = 4

FAULTS = (
    "no_scheduler",  # the scheduler's state is not loaded
    "no_torch_rng",  # torch's RNG (dropout) is not restored
    "no_skip",  # a resumed epoch starts from its first batch again
    "skip_off_by_one",  # one batch too many is skipped
    "no_generator",  # the loader's shuffling generator is not restored
    "no_loader_state",  # a StatefulDataLoader's state is not loaded
    "no_optimizer",  # the optimizer (its moments and momentum buffers) is not loaded
    "no_scaler",  # the GradScaler's state is not loaded
    "ema_counter_reset",  # the EMA weights are loaded, its update counter is not
    "orig_mod_strict_false",  # compiled keys ("_orig_mod.") loaded into the plain model
    "no_set_epoch",  # a resumed run does not call sampler.set_epoch before iterating
    "no_loss_division",  # each microbatch's loss is not divided by the accumulation count
)


class Samples(Dataset):
    """A fixed synthetic dataset; each item is (sample id, input, target).

    `augment`: "none"; "per_sample" (noise from a generator seeded by the sample
    and the epoch: the same in every run); "worker_rng" (noise from the global
    torch RNG of the process that loads it: a DataLoader worker's own RNG).
    """

    def __init__(self, model: str, augment: str) -> None:
        generator = torch.Generator().manual_seed(SEED)
        if model == "transformer":
            self.inputs = torch.randint(1, 16, (SAMPLES, 6), generator=generator)
        elif model == "cnn":
            self.inputs = torch.randn(SAMPLES, 1, 8, 8, generator=generator)
        else:
            self.inputs = torch.randn(SAMPLES, 8, generator=generator)
        if model == "tiny":
            self.targets = torch.randn(SAMPLES, 1, generator=generator)
        else:
            self.targets = torch.randint(0, CLASSES, (SAMPLES,), generator=generator)
        self.augment = augment if model != "transformer" else "none"
        self.epoch = 0

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int):
        inputs = self.inputs[index]
        if self.augment == "per_sample":
            generator = torch.Generator().manual_seed(SEED * 100_003 + self.epoch * 1009 + index)
            inputs = inputs + 0.05 * torch.randn(inputs.shape, generator=generator)
        elif self.augment == "worker_rng":
            inputs = inputs + 0.05 * torch.randn_like(inputs)
        return index, inputs, self.targets[index]


class TinyTransformer(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(16, 16)
        self.position = nn.Parameter(torch.zeros(6, 16))
        self.encoder = nn.TransformerEncoderLayer(
            16, 2, 32, dropout=dropout, batch_first=True, norm_first=True
        )
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.embedding(tokens) + self.position)
        return self.head(self.norm(hidden).mean(dim=1))


class Scaled(nn.Module):
    """A learned 1-element temperature and a 1-element buffer counting forward passes."""

    def __init__(self) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.ones(1))
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
        return inputs * self.temperature


def build_model(kind: str, dropout: float) -> nn.Module:
    if kind == "transformer":
        return TinyTransformer(dropout)
    if kind == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Conv2d(4, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(8, CLASSES),
        )
    if kind == "tiny":
        return nn.Sequential(
            nn.Linear(8, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 1), Scaled()
        )
    return nn.Sequential(
        nn.Linear(8, 32), nn.LayerNorm(32), nn.GELU(), nn.Dropout(dropout), nn.Linear(32, CLASSES)
    )


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled weight decay."""

    def __init__(self, params, lr: float = 1e-4, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for parameter in group["params"]:
                if parameter.grad is None:
                    continue
                state = self.state[parameter]
                if not state:
                    state["exp_avg"] = torch.zeros_like(parameter)
                exp_avg = state["exp_avg"]
                parameter.mul_(1 - group["lr"] * group["weight_decay"])
                update = exp_avg.mul(beta1).add_(parameter.grad, alpha=1 - beta1).sign_()
                parameter.add_(update, alpha=-group["lr"])
                exp_avg.mul_(beta2).add_(parameter.grad, alpha=1 - beta2)


def build_optimizer(kind: str, model: nn.Module) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    if kind == "adafactor":
        return torch.optim.Adafactor(model.parameters(), lr=1e-2)
    if kind == "lion":
        return Lion(model.parameters(), lr=1e-3, weight_decay=0.01)
    return torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)


def warmup_cosine(step: int) -> float:
    if step < 2:
        return (step + 1) / 2
    progress = (step - 2) / (SCHEDULE_STEPS - 2)
    return 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def build_scheduler(kind: str, optimizer: torch.optim.Optimizer):
    sched = torch.optim.lr_scheduler
    if kind == "sequential":
        warmup = sched.LinearLR(optimizer, start_factor=0.1, total_iters=2)
        cosine = sched.CosineAnnealingLR(optimizer, T_max=SCHEDULE_STEPS - 2)
        return sched.SequentialLR(optimizer, [warmup, cosine], milestones=[2])
    if kind == "onecycle":
        max_lr = optimizer.param_groups[0]["lr"]
        return sched.OneCycleLR(optimizer, max_lr=max_lr, total_steps=SCHEDULE_STEPS)
    if kind == "multistep":
        return sched.MultiStepLR(optimizer, milestones=[3, 6], gamma=0.5)
    if kind == "plateau":
        return sched.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=1)
    return sched.LambdaLR(optimizer, warmup_cosine)


class EMA:
    """An exponential moving average of the weights, with a warm-up counted in updates."""

    def __init__(self, model: nn.Module) -> None:
        self.shadow = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.num_updates = 0

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        self.num_updates += 1
        decay = min(0.99, (1 + self.num_updates) / (10 + self.num_updates))
        for key, value in model.state_dict().items():
            if value.is_floating_point():
                self.shadow[key].mul_(decay).add_(value.detach(), alpha=1 - decay)
            else:
                self.shadow[key].copy_(value)

    def state_dict(self) -> dict:
        return {"num_updates": self.num_updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict) -> None:
        self.num_updates = state["num_updates"]
        self.shadow = {k: v.clone() for k, v in state["shadow"].items()}


# The nondeterministic form: a real sum whose order is drawn outside every seeded RNG.
_ORDER = random.Random(int.from_bytes(os.urandom(8), "little"))
_TERMS = torch.rand(4096, generator=torch.Generator().manual_seed(5)) / 2048


def reordered_sum() -> torch.Tensor:
    order = torch.tensor(_ORDER.sample(range(len(_TERMS)), len(_TERMS)))
    return _TERMS[order].sum()


def make_loader(args, dataset: Samples, generator: torch.Generator):
    batch_size = args.batch
    if args.loader == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=True,
            generator=generator,
            num_workers=args.workers,
        )
    sampler = None
    if args.loader == "random_sampler":
        sampler = torch.utils.data.RandomSampler(dataset, generator=generator)
    elif args.loader == "weighted":
        weights = torch.linspace(1.0, 2.0, SAMPLES)
        sampler = torch.utils.data.WeightedRandomSampler(
            weights, num_samples=SAMPLES, replacement=True, generator=generator
        )
    elif args.loader == "distributed":
        sampler = torch.utils.data.DistributedSampler(
            dataset, num_replicas=1, rank=0, shuffle=True, seed=SEED
        )
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=args.loader == "shuffle",
        sampler=sampler,
        generator=generator,
        num_workers=args.workers,
    )


def newest_checkpoint(directory: Path) -> Path | None:
    found = sorted(directory.glob("step_*.pt"))
    return found[-1] if found else None


def observe(path: str | Path) -> dict:
    """What the corpus compares: the checkpoint (the newest one, for a directory)."""
    path = Path(path)
    if path.is_dir():
        path = newest_checkpoint(path)
    return torch.load(path, map_location="cpu", weights_only=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--model", default="mlp", choices=("mlp", "transformer", "cnn", "tiny"))
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument(
        "--optimizer", default="adamw", choices=("adamw", "sgd", "adafactor", "lion")
    )
    parser.add_argument(
        "--scheduler",
        default="cosine",
        choices=("cosine", "sequential", "onecycle", "multistep", "plateau"),
    )
    parser.add_argument(
        "--loader",
        default="shuffle",
        choices=("shuffle", "random_sampler", "weighted", "distributed", "stateful"),
    )
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--augment", default="none", choices=("none", "per_sample", "worker_rng"))
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--accum", type=int, default=1, help="microbatches per optimizer step")
    parser.add_argument("--clip", type=float, default=0.0)
    parser.add_argument("--ema", action="store_true")
    parser.add_argument("--amp", default="none", choices=("none", "bf16", "fp16"))
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--track-ids", action="store_true")
    parser.add_argument(
        "--auto-resume",
        action="store_true",
        help="--checkpoint is a directory: save every 2 steps, resume from the newest",
    )
    parser.add_argument("--noisy", action="store_true")
    parser.add_argument("--fault", choices=FAULTS)
    args = parser.parse_args()

    random.seed(SEED)
    torch.manual_seed(SEED)
    model = build_model(args.model, args.dropout)
    optimizer = build_optimizer(args.optimizer, model)
    scheduler = build_scheduler(args.scheduler, optimizer)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10) if args.amp == "fp16" else None
    ema = EMA(model) if args.ema else None
    trained = torch.compile(model) if args.compile else model
    dataset = Samples(args.model, args.augment)
    generator = torch.Generator().manual_seed(SEED)
    loader = make_loader(args, dataset, generator)
    if args.track_ids:
        from trainparity.distributed import track_ids

        loader = track_ids(loader, id_of=lambda batch: batch[0], epoch=lambda: epoch)
    steps_per_epoch = len(loader) // args.accum

    resume_from = args.resume
    if args.auto_resume:
        args.checkpoint.mkdir(parents=True, exist_ok=True)
        resume_from = newest_checkpoint(args.checkpoint)
    step, epoch = 0, 0
    data: dict = {"epoch": 0, "generator_at_epoch_start": generator.get_state()}
    if resume_from is not None:
        state = torch.load(resume_from, map_location="cpu", weights_only=False)
        if args.fault == "orig_mod_strict_false":
            # The checkpoint came from the compiled module; the plain one has no "_orig_mod." keys.
            model.load_state_dict(state["model"], strict=False)
        else:
            trained.load_state_dict(state["model"])
        if args.fault != "no_optimizer":
            optimizer.load_state_dict(state["optimizer"])
        if args.fault != "no_scheduler":
            scheduler.load_state_dict(state["scheduler"])
        if scaler is not None and args.fault != "no_scaler":
            scaler.load_state_dict(state["scaler"])
        if ema is not None:
            ema.load_state_dict(state["ema"])
            if args.fault == "ema_counter_reset":
                ema.num_updates = 0
        if args.fault != "no_torch_rng":
            torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        data = state["data"]
        epoch, step = data["epoch"], state["step"]
        # Before the loader restarts: its workers take their copy of the dataset then.
        dataset.epoch = epoch
        if args.loader == "stateful":
            if args.fault != "no_loader_state":
                loader.load_state_dict(data["loader"])
        elif args.fault != "no_generator":
            generator.set_state(data["generator_at_epoch_start"])

    def observed() -> dict:
        state = {
            "model": trained.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
            "data": data,
            "step": step,
        }
        if ema is not None:
            state["ema"] = ema.state_dict()
        if scaler is not None:
            state["scaler"] = scaler.state_dict()
        return state

    def save() -> None:
        if args.auto_resume:
            torch.save(observed(), args.checkpoint / f"step_{step:05d}.pt")
        else:
            args.checkpoint.parent.mkdir(parents=True, exist_ok=True)
            torch.save(observed(), args.checkpoint)

    if args.loader == "stateful":
        data = {"epoch": epoch, "loader": loader.state_dict()}
    trainparity.record(step, observed())

    autocast = (
        torch.autocast("cpu", dtype=torch.bfloat16 if args.amp == "bf16" else torch.float16)
        if args.amp != "none"
        else None
    )
    while step < args.end_step:
        dataset.epoch = epoch
        if args.loader == "distributed" and not (args.fault == "no_set_epoch" and args.resume):
            loader.sampler.set_epoch(epoch)
        if args.loader == "stateful":
            batches = iter(loader)  # a restored loader continues where its state says
        else:
            data = {"epoch": epoch, "generator_at_epoch_start": generator.get_state()}
            # Batches of this epoch already trained on (> 0 only when resumed mid-epoch).
            skip = (step - epoch * steps_per_epoch) * args.accum
            if args.fault == "no_skip" and resume_from is not None:
                skip = 0
            if args.fault == "skip_off_by_one" and resume_from is not None and skip:
                skip += 1
            resume_from = None
            batches = itertools.islice(loader, skip, None)
        microbatches = []
        for batch in batches:
            microbatches.append(batch)
            if len(microbatches) < args.accum:
                continue
            trained.train()
            optimizer.zero_grad(set_to_none=True)
            window_loss = 0.0
            for _, inputs, targets in microbatches:
                if autocast is not None:
                    with autocast:
                        outputs = trained(inputs)
                else:
                    outputs = trained(inputs)
                if args.model == "tiny":
                    loss = nn.functional.mse_loss(outputs.float(), targets)
                else:
                    loss = nn.functional.cross_entropy(outputs.float(), targets)
                if args.noisy:
                    loss = loss * reordered_sum()
                if args.fault != "no_loss_division":
                    loss = loss / args.accum
                window_loss += loss.item()
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
            microbatches = []
            if scaler is not None:
                scaler.unscale_(optimizer)
            if args.clip:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            if args.scheduler == "plateau":
                scheduler.step(window_loss)
            else:
                scheduler.step()
            if ema is not None:
                ema.update(model)
            step += 1
            if args.loader == "stateful":
                data = {"epoch": epoch, "loader": loader.state_dict()}
            trainparity.record(step, observed())
            if args.auto_resume and step % 2 == 0:
                save()
            if step == args.end_step:
                break
        else:
            epoch += 1
            continue
        break
    save()


if __name__ == "__main__":
    main()
