"""Train a small MLP with checkpoint save/resume: the kind of script check_resume wraps.

AdamW, a cosine learning-rate schedule and a shuffled DataLoader that resumes
mid-epoch. Usage: python train.py --checkpoint PATH --end-step N [--resume PATH]
"""

import argparse
import itertools
from pathlib import Path

import torch
import trainparity
from torch.utils.data import DataLoader, TensorDataset

SCHEDULE_STEPS = 8  # the cosine schedule's length: every run follows the same curve
BATCH_SIZE = 4


def build(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=SCHEDULE_STEPS)
    features = torch.randn(12, 4)
    dataset = TensorDataset(features, features.sum(dim=1, keepdim=True))
    return model, optimizer, scheduler, dataset


def observed(model, optimizer, scheduler, data: dict, step: int) -> dict:
    """What the checkpoint holds and parity_case.observe_checkpoint reads back; record() takes the same."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": {"torch_cpu": torch.get_rng_state()},
        "data": data,
        "step": step,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--forget-scheduler", action="store_true", help="an intentional resume bug")
    args = parser.parse_args()

    model, optimizer, scheduler, dataset = build(seed=17)
    # The loader shuffles with its own generator: its state when an epoch's iterator is
    # created fixes that epoch's order, so that state is the data position to save.
    generator = torch.Generator().manual_seed(17)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, shuffle=True, generator=generator)
    step, epoch = 0, 0
    if args.resume is not None:
        state = torch.load(args.resume, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if not args.forget_scheduler:
            scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch_cpu"])
        generator.set_state(state["data"]["generator_at_epoch_start"])
        epoch, step = state["data"]["epoch"], state["step"]
    data = {"epoch": epoch, "generator_at_epoch_start": generator.get_state()}
    # Step 0 of a fresh run, or the round trip right after loading (free outside a check).
    trainparity.record(step, observed(model, optimizer, scheduler, data, step))

    while step < args.end_step:
        data = {"epoch": epoch, "generator_at_epoch_start": generator.get_state()}
        trained_this_epoch = step - epoch * len(loader)  # > 0 only when resumed mid-epoch
        for inputs, targets in itertools.islice(loader, trained_this_epoch, None):
            loss = torch.nn.functional.mse_loss(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            trainparity.record(step, observed(model, optimizer, scheduler, data, step))
            if step == args.end_step:
                break
        else:
            epoch += 1

    args.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    torch.save(observed(model, optimizer, scheduler, data, step), args.checkpoint)


if __name__ == "__main__":
    main()
