"""A small training script with checkpoint save/resume: the kind of script check_resume wraps."""

import argparse
import random
from pathlib import Path

import torch
import trainparity


def build(seed: int):
    torch.manual_seed(seed)
    random.seed(seed)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    return model, optimizer, scheduler


def observed(model, optimizer, scheduler, step: int) -> dict:
    """What parity_case.observe_checkpoint reads back: record() compares the same mapping per step."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng": {"torch_cpu": torch.get_rng_state(), "python": random.getstate()},
        "step": step,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--forget-scheduler", action="store_true", help="an intentional resume bug")
    args = parser.parse_args()

    model, optimizer, scheduler = build(seed=17)
    step = 0
    if args.resume is not None:
        state = torch.load(args.resume, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if not args.forget_scheduler:
            scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["rng"]["torch_cpu"])
        random.setstate(state["rng"]["python"])
        step = state["step"]
        trainparity.record(step, observed(model, optimizer, scheduler, step))  # the round trip

    while step < args.end_step:
        inputs, targets = torch.randn(4, 2), torch.randn(4, 1)
        noise = random.random() * 1e-3  # Python's RNG is training state too
        loss = torch.nn.functional.mse_loss(model(inputs), targets + noise)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        trainparity.record(step, observed(model, optimizer, scheduler, step))  # free outside a check

    args.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    torch.save(observed(model, optimizer, scheduler, step), args.checkpoint)


if __name__ == "__main__":
    main()
