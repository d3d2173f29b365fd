"""Writes a ZeRO checkpoint of a model of about `--million` million parameters (bench_sharded's --deepspeed).

    DS_ACCELERATOR=cpu torchrun --standalone --nproc-per-node=2 deepspeed_checkpoint_job.py \
        --checkpoint DIR [--million 100] [--stage 2]

A stack of 4096-wide linear layers, AdamW under ZeRO stage `--stage` on
gloo ranks, one training step (so the optimizer files hold real moments),
then `engine.save_checkpoint`.
"""

import argparse
from pathlib import Path

import deepspeed
import torch

WIDTH = 4096


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--million", type=int, default=100)
    parser.add_argument("--stage", type=int, default=2)
    args = parser.parse_args()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    layers = max(1, round(args.million * 1e6 / (WIDTH * WIDTH + WIDTH)))
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, _, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        config={
            "train_micro_batch_size_per_gpu": 2,
            "zero_optimization": {"stage": args.stage},
            "steps_per_print": 1_000_000,
        },
    )
    inputs = torch.randn(2, WIDTH)
    loss = engine(inputs).square().mean()
    engine.backward(loss)
    engine.step()
    engine.save_checkpoint(str(args.checkpoint))


if __name__ == "__main__":
    main()
