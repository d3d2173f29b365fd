"""A DDP training script on gloo ranks (torchrun): DistributedSampler, set_epoch, a DCP checkpoint.

    python -m torch.distributed.run --standalone --nproc-per-node=2 ddp_train.py \
        --checkpoint DIR --end-step N [--resume DIR] [--program sgd|adamw] [--noisy] [--fault NAME]

Every rank trains a DDP model with dropout on its `DistributedSampler`
share (shuffled, `set_epoch` every epoch); 16 samples, 4 a rank per step:
2 steps an epoch. `sgd`: SGD with momentum and a MultiStepLR, one batch of
4 a step. `adamw`: AdamW with a warm-up, 2 microbatches of 2 a step
(`no_sync` on the first), gradients clipped at 0.5. The checkpoint is a
directory: the DCP files of model, optimizer and step (all ranks
together), the scheduler's state (rank 0) and one RNG file per rank, since every rank draws its own dropout
masks. The resumed run skips the batches its epoch already consumed.
`trainparity.record()` runs after loading and after every step, on every
rank; `record_ids` records the sample IDs each rank trains on.

`--noisy` multiplies each rank's loss by 1 computed as a float32 sum in an
order drawn from os.urandom (real rounding differences, averaged by DDP
into both ranks; nothing added to any state).

`--fault` (resume bugs): `set-epoch-missing` (the resumed epoch's sampler
is not told its epoch: it replays epoch 0's order), `rank-rng-not-restored`
(every rank restores rank 0's RNG file), `fresh-optimizer-load` (dcp.load
into a fresh optimizer's state_dict(): the moments are lost silently).
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
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler
from trainparity.distributed import end_rank

_ORDER = numpy.random.default_rng(int.from_bytes(os.urandom(8), "little"))
_TERMS = (
    torch.rand(1024, generator=torch.Generator().manual_seed(7)) * torch.logspace(-3, 3, 1024)
).numpy()
_TOTAL = numpy.float32(_TERMS.astype(numpy.float64).sum())


def one_summed_in_random_order() -> float:
    """1, up to the rounding of a sequential float32 sum whose order is drawn per call."""
    return float(numpy.add.accumulate(_TERMS[_ORDER.permutation(len(_TERMS))])[-1] / _TOTAL)


class IndexedSamples(Dataset):
    """Sample i is (i, features, target), the same in every process; i is its stable ID."""

    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(count, 4, generator=generator)
        self.targets = self.features.sum(dim=1, keepdim=True).sin()

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int):
        return index, self.features[index], self.targets[index]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--program", choices=("sgd", "adamw"), default="sgd")
    parser.add_argument("--noisy", action="store_true")
    parser.add_argument(
        "--fault", choices=("set-epoch-missing", "rank-rng-not-restored", "fresh-optimizer-load")
    )
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(17)  # the same initial weights on every rank
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1)
        )
    )
    accumulation = 2 if args.program == "adamw" else 1
    if args.program == "adamw":
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 3))
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 3], gamma=0.5)
    torch.manual_seed(1000 + rank)  # each rank its own stream: dropout masks differ per rank

    dataset = IndexedSamples(16)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=3)
    # Every new DataLoader iterator draws a seed from the generator it is given (by default
    # the global one, which dropout uses): a resumed run starts one more iterator than the
    # uninterrupted run, so without a generator of its own every later mask would shift.
    loader = DataLoader(
        dataset,
        batch_size=4 // accumulation,
        sampler=sampler,
        generator=torch.Generator().manual_seed(5),
    )
    batches_per_epoch = len(loader)

    step = 0
    if args.resume is not None:
        step = load(args, model, optimizer, scheduler, rank)
    trainparity.record(step, observed(model, optimizer, scheduler, step))

    epoch, position = divmod(step * accumulation, batches_per_epoch)
    while step < args.end_step:
        if not (args.fault == "set-epoch-missing" and position > 0):
            sampler.set_epoch(epoch)
        microbatch = 0
        for index, (sample_ids, features, targets) in enumerate(loader):
            if index < position:
                continue  # consumed before the checkpoint
            trainparity.record_ids(sample_ids, epoch=epoch)
            microbatch += 1
            syncing = microbatch % accumulation == 0
            loss = torch.nn.functional.mse_loss(model(features), targets) / accumulation
            if args.noisy:
                loss = loss * one_summed_in_random_order()
            if syncing:
                loss.backward()
            else:
                with model.no_sync():  # the gradients average over ranks at the last microbatch
                    loss.backward()
                continue
            if args.program == "adamw":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            trainparity.record(step, observed(model, optimizer, scheduler, step))
            if step == args.end_step:
                break
        epoch, position = epoch + 1, 0

    save(args.checkpoint, model, optimizer, scheduler, step, rank)
    # Barrier, destroy_process_group, flush record_ids, os._exit: skips the destructors,
    # where torch's gloo teardown can deadlock (docs/distributed.md).
    end_rank()


def observed(model, optimizer, scheduler, step: int) -> dict:
    return {
        "model": model.module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {"torch": torch.get_rng_state()},  # this rank's dropout stream
        "scheduler": scheduler.state_dict(),
        "step": step,
    }


def save(directory: Path, model, optimizer, scheduler, step: int, rank: int) -> None:
    """DCP: every rank writes its part of model and optimizer; rank 0 the scheduler; each its RNG."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save(
        {"model": model_state, "optim": optimizer_state, "train": {"step": step}},
        checkpoint_id=directory,
    )
    if rank == 0:
        torch.save(scheduler.state_dict(), directory / "scheduler.pt")
    torch.save({"torch_cpu": torch.get_rng_state()}, directory / f"rng-rank{rank}.pt")
    dist.barrier()  # every rank's files exist before any rank exits


def load(args, model, optimizer, scheduler, rank: int) -> int:
    if args.fault == "fresh-optimizer-load":
        # The bug: a fresh optimizer's state_dict() has no per-parameter state yet, so
        # dcp.load finds no moments to fill and the optimizer resumes without them.
        state = {
            "model": model.module.state_dict(),
            "optim": optimizer.state_dict(),
            "train": {"step": 0},
        }
        dcp.load(state, checkpoint_id=args.resume)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
    else:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optimizer_state, "train": {"step": 0}}
        dcp.load(state, checkpoint_id=args.resume)
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
    scheduler.load_state_dict(torch.load(args.resume / "scheduler.pt", weights_only=False))
    source = 0 if args.fault == "rank-rng-not-restored" else rank
    torch.set_rng_state(torch.load(args.resume / f"rng-rank{source}.pt")["torch_cpu"])
    return state["train"]["step"]


if __name__ == "__main__":
    main()
