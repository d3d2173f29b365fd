"""An FSDP2 (`fully_shard`) training script on gloo ranks (torchrun) with a DCP checkpoint.

    python -m torch.distributed.run --standalone --nproc-per-node=2 fsdp2_train.py \
        --checkpoint DIR --end-step N [--resume DIR] [--program embed|mlp] [--noisy] [--fault NAME]

Each layer is wrapped with `fully_shard`, then the root. A step is one
optimizer step over a global batch of 4 samples in a fixed shuffled order;
rank r of W takes the r-th of W equal parts of it, and the data position is
the step times the global batch. `embed`: an Embedding(65, 8) (65 rows:
uneven shards on 2 ranks), LayerNorm and a 1-output head; AdamW with a
warm-up. `mlp`: Linear, Tanh, dropout (each rank its own stream), a
1-output head; SGD with momentum and cosine annealing. The checkpoint is a
DCP directory written through `get_state_dict` (model, optimizer, step; all
ranks together) and read back through `set_state_dict`, plus the
scheduler's state (rank 0) and one RNG file per rank. `trainparity.record()`
runs after loading and after every step on every rank; `record_ids` records
the samples each rank trains on.

`--noisy` multiplies each rank's loss by 1 computed as a float32 sum in an
order drawn from os.urandom (real rounding differences, reduced into both
ranks' gradients; nothing added to any state).

`--fault` (resume bugs): `optimizer-not-saved` (the checkpoint holds the
model and step only: the resumed run starts a fresh optimizer),
`position-not-skipped` (the resumed run reads the data from its start).
"""

import argparse
import os
from pathlib import Path

import numpy
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import trainparity
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard
from trainparity.distributed import end_rank

GLOBAL_BATCH = 4
SAMPLES = 40
VOCABULARY = 65
_ORDER = numpy.random.default_rng(int.from_bytes(os.urandom(8), "little"))
_TERMS = (
    torch.rand(1024, generator=torch.Generator().manual_seed(7)) * torch.logspace(-3, 3, 1024)
).numpy()
_TOTAL = numpy.float32(_TERMS.astype(numpy.float64).sum())


def one_summed_in_random_order() -> float:
    """1, up to the rounding of a sequential float32 sum whose order is drawn per call."""
    return float(numpy.add.accumulate(_TERMS[_ORDER.permutation(len(_TERMS))])[-1] / _TOTAL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--total-steps", type=int, default=4)  # the LR schedule's length
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--program", choices=("embed", "mlp"), default="embed")
    parser.add_argument("--noisy", action="store_true")
    parser.add_argument("--fault", choices=("optimizer-not-saved", "position-not-skipped"))
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(17)  # the same initial weights on every rank, sharded below
    if args.program == "embed":
        model = torch.nn.Sequential(
            torch.nn.Embedding(VOCABULARY, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1)
        )
    else:
        model = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(16, 1)
        )
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer)
    fully_shard(model)
    if args.program == "embed":
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.total_steps)
    torch.manual_seed(100 + rank)  # each rank its own dropout stream

    step = 0
    if args.resume is not None:
        step = load(args, model, optimizer, scheduler, rank)
    trainparity.record(step, observed(model, optimizer, scheduler, step))

    generator = torch.Generator().manual_seed(3)
    order = torch.randperm(SAMPLES, generator=generator)
    tokens = torch.randint(VOCABULARY, (SAMPLES,), generator=generator)
    features = torch.randn(SAMPLES, 4, generator=generator)
    position = 0 if args.fault == "position-not-skipped" else step * GLOBAL_BATCH
    while step < args.end_step:
        share = GLOBAL_BATCH // world_size
        first = position + rank * share
        picked = order[[index % SAMPLES for index in range(first, first + share)]]
        trainparity.record_ids(picked.tolist(), epoch=0)
        if args.program == "embed":
            prediction = model(tokens[picked]).squeeze(1)
            target = tokens[picked].float() / VOCABULARY
        else:
            prediction = model(features[picked]).squeeze(1)
            target = features[picked].sum(dim=1).sin()
        loss = torch.nn.functional.mse_loss(prediction, target)  # FSDP averages it over ranks
        if args.noisy:
            loss = loss * one_summed_in_random_order()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        position += GLOBAL_BATCH
        trainparity.record(step, observed(model, optimizer, scheduler, step))

    save(args, model, optimizer, scheduler, step, rank)
    end_rank()


def observed(model, optimizer, scheduler, step: int) -> dict:
    """The sharded model and optimizer (each rank its local shards), this rank's RNG, the LR."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {
        "model": model_state,
        "optim": optimizer_state,
        "rng": {"torch": torch.get_rng_state()},
        "train": {"step": step, "lr": scheduler.get_last_lr()[0]},
    }


def save(args, model, optimizer, scheduler, step: int, rank: int) -> None:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "train": {"step": step}}
    if args.fault != "optimizer-not-saved":
        state["optim"] = optimizer_state
    dcp.save(state, checkpoint_id=args.checkpoint)
    if rank == 0:
        torch.save(scheduler.state_dict(), args.checkpoint / "scheduler.pt")
    torch.save({"torch_cpu": torch.get_rng_state()}, args.checkpoint / f"rng-rank{rank}.pt")
    dist.barrier()  # every rank's files exist before any rank exits


def load(args, model, optimizer, scheduler, rank: int) -> int:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "train": {"step": 0}}
    if args.fault != "optimizer-not-saved":
        state["optim"] = optimizer_state
    dcp.load(state, checkpoint_id=args.resume)
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state.get("optim", optimizer_state),
    )
    scheduler.load_state_dict(torch.load(args.resume / "scheduler.pt", weights_only=False))
    torch.set_rng_state(torch.load(args.resume / f"rng-rank{rank}.pt")["torch_cpu"])
    return state["train"]["step"]


if __name__ == "__main__":
    main()
