"""A 2-rank DDP training script with a DCP checkpoint: the kind of script check_resume wraps.

Run by torchrun (one process per rank, gloo on CPU):

    python -m torch.distributed.run --standalone --nproc-per-node=2 train.py \
        --checkpoint ckpt --end-step 4 [--resume ckpt]

Every rank trains a DDP model on its DistributedSampler share; a step is one
optimizer step over `--accumulation` batches. The checkpoint is a directory:
the DCP files of model, optimizer and training position (written by all
ranks together) plus one RNG file per rank (`rng-rank{R}.pt`), because every
rank draws its own dropout masks and noise. The `--fault-*` flags are
intentional resume bugs that the example's tests expect check_resume to catch.
"""

import argparse
import random
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

import trainparity
from trainparity.distributed import end_rank


class IndexedSamples(Dataset):
    """Sample i is (i, features, target), the same in every process; i is its stable ID."""

    def __init__(self, count: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(count, 4, generator=generator)
        self.targets = torch.randn(count, 1, generator=generator)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int):
        return index, self.features[index], self.targets[index]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--samples", type=int, default=14)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--accumulation", type=int, default=2, help="batches per optimizer step")
    parser.add_argument("--fault-rng-from-other-rank", action="store_true")
    parser.add_argument("--fault-fresh-optimizer-load", action="store_true")
    parser.add_argument("--fault-restart-epoch", action="store_true")
    parser.add_argument("--fault-skip-optimizer-steps", action="store_true")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(17)  # the same initial weights on every rank
    model = DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    torch.manual_seed(1000 + rank)  # each rank its own stream: dropout masks differ per rank
    random.seed(1000 + rank)

    dataset = IndexedSamples(args.samples)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=3)
    # Every new DataLoader iterator draws a seed from the generator it is given (by
    # default the global one): a resumed run starts one more iterator than the
    # uninterrupted run, so without its own generator the dropout masks would shift.
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        sampler=sampler,
        generator=torch.Generator().manual_seed(5),
    )
    batches_per_epoch = len(loader)
    if batches_per_epoch % args.accumulation:
        raise SystemExit("choose --samples so that an epoch holds whole optimizer steps")

    step = 0
    if args.resume is not None:
        step = load(args, model, optimizer, rank, world_size)

    # The data position follows from the step: batches consumed = step * accumulation.
    consumed = step * args.accumulation
    if args.fault_skip_optimizer_steps:
        consumed = step  # the bug: counts optimizer steps, not batches
    if args.fault_restart_epoch:
        consumed -= consumed % batches_per_epoch  # the bug: forgets the position in the epoch
    epoch, position = divmod(consumed, batches_per_epoch)
    while step < args.end_step:
        sampler.set_epoch(epoch)
        for index, (sample_ids, features, targets) in enumerate(loader):
            if index < position:
                continue  # already consumed before the checkpoint
            trainparity.record_ids(sample_ids, epoch=epoch)
            noise = random.random() * 1e-3
            prediction = model(features)
            loss = torch.nn.functional.mse_loss(prediction, targets + noise) / args.accumulation
            loss.backward()
            if (index + 1) % args.accumulation == 0:
                optimizer.step()
                optimizer.zero_grad()
                step += 1
                if step == args.end_step:
                    break
        epoch, position = epoch + 1, 0

    save(args.checkpoint, model, optimizer, step, rank)
    # Barrier, destroy_process_group, flush record_ids, os._exit: skips the destructors,
    # where torch's gloo teardown can deadlock (docs/distributed.md).
    end_rank()


def save(directory: Path, model, optimizer, step: int, rank: int) -> None:
    """DCP: every rank writes its part of model and optimizer; plus this rank's RNG file."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save(
        {"model": model_state, "optim": optimizer_state, "train": {"step": step}},
        checkpoint_id=directory,
    )
    torch.save(
        {"torch_cpu": torch.get_rng_state(), "python": random.getstate()},
        directory / f"rng-rank{rank}.pt",
    )
    dist.barrier()  # every rank's files exist before any rank exits


def load(args, model, optimizer, rank: int, world_size: int) -> int:
    """Restore what save() wrote; returns the step to continue from."""
    if args.fault_fresh_optimizer_load:
        # The bug: a fresh optimizer's state_dict() holds no per-parameter state
        # yet, so dcp.load finds no exp_avg/exp_avg_sq/step entries to fill and
        # the optimizer resumes with empty moments (no error is raised).
        state = {
            "model": model.module.state_dict(),
            "optim": optimizer.state_dict(),
            "train": {"step": 0},
        }
        dcp.load(state, checkpoint_id=args.resume)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
    else:
        # get_state_dict fills the fresh optimizer's state with placeholders
        # that dcp.load then overwrites in place.
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optim": optimizer_state, "train": {"step": 0}}
        dcp.load(state, checkpoint_id=args.resume)
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
    source = (rank + 1) % world_size if args.fault_rng_from_other_rank else rank
    rng = torch.load(args.resume / f"rng-rank{source}.pt", weights_only=True)
    torch.set_rng_state(rng["torch_cpu"])
    random.setstate(rng["python"])
    return state["train"]["step"]


if __name__ == "__main__":
    main()
