"""A tiny training script for docs/examples/notebook.ipynb: saves a checkpoint at --end-step.

`python tiny_train.py --checkpoint CK --end-step N [--resume CK0]` trains a
two-weight linear model on random batches with SGD and momentum, resuming
from CK0 when given (model, optimizer, step and the RNG state), and saves
CK. `--wait-for-interrupt FILE` touches FILE and then sleeps: the
notebook's interrupt cell uses it to have a check that is surely running.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--wait-for-interrupt", type=Path)
    arguments = parser.parse_args()
    if arguments.wait_for_interrupt is not None:
        arguments.wait_for_interrupt.touch()
        time.sleep(600)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = 0
    if arguments.resume is not None:
        saved = torch.load(arguments.resume, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
        step = saved["step"]
    while step < arguments.end_step:
        batch = torch.randn(4, 2)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
    arguments.checkpoint.parent.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "step": step,
        },
        arguments.checkpoint,
    )


if __name__ == "__main__":
    main()
