"""A CUDA training script that is not bitwise reproducible: index_add_ and index_select's backward add with atomics.

Every step gathers embedding rows for 8192 indices drawn from 48 rows (so
thousands of atomic additions land on each row in the backward pass) and
pools them into 64 groups with index_add_ (atomics again, in the forward).
The order in which the GPU's threads add is not fixed, so two runs of the
same seed part at the last bit and drift. `--lossy-restore δ` resumes with
the embedding times 1 + δ: a fault for the envelope to find.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import trainparity

MODULE = "tests.gpu.index_add_training"
CHECKPOINT = "checkpoint.pt"
ROWS, WIDTH, INDICES, GROUPS = 48, 512, 8192, 64


class Run:
    def __init__(self) -> None:
        torch.manual_seed(5)
        self.embedding = torch.nn.Parameter(torch.randn(ROWS, WIDTH, device="cuda") * 0.1)
        self.head = torch.nn.Linear(WIDTH, 8).cuda()
        self.optimizer = torch.optim.Adam([self.embedding, *self.head.parameters()], lr=1e-3)
        self.step = 0

    def state(self) -> dict[str, object]:
        return {
            "embedding": self.embedding.detach(),
            "head": self.head.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "step": self.step,
        }


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    indices = torch.randint(0, ROWS, (INDICES,), generator=generator)
    groups = torch.randint(0, GROUPS, (INDICES,), generator=generator)
    targets = torch.randn(GROUPS, 8, generator=generator)
    return indices.cuda(), groups.cuda(), targets.cuda()


def train_one_step(run: Run) -> None:
    indices, groups, targets = batch(run.step)
    gathered = run.embedding.index_select(0, indices)  # backward: index_add_ with atomics
    pooled = torch.zeros(GROUPS, WIDTH, device="cuda").index_add_(0, groups, gathered)
    loss = torch.nn.functional.mse_loss(run.head(pooled / 128.0), targets)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    run.optimizer.step()
    run.step += 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=MODULE)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path, default=None)
    parser.add_argument("--lossy-restore", type=float, default=0.0)
    arguments = parser.parse_args(argv)
    run = Run()
    if arguments.resume is not None:
        saved = torch.load(arguments.resume, map_location="cpu", weights_only=False)
        with torch.no_grad():
            run.embedding.copy_(saved["embedding"] * (1.0 + arguments.lossy_restore))
        run.head.load_state_dict(saved["head"])
        run.optimizer.load_state_dict(saved["optimizer"])
        run.step = saved["step"]
    trainparity.record(run.step, run.state())
    while run.step < arguments.end_step:
        train_one_step(run)
        trainparity.record(run.step, run.state())
    arguments.run_dir.mkdir(parents=True, exist_ok=True)
    torch.save(run.state(), arguments.run_dir / CHECKPOINT)
    return 0


class IndexAddCase:
    """Split at 3 of 6, recorded every step, on the GPU."""

    name = "cuda_index_add"
    split_step = 3
    total_step = 6
    device = "cuda"
    lossy = 0.0

    def command(self, plan) -> Sequence[str]:
        command = [sys.executable, "-m", MODULE, "--run-dir", str(plan.run_dir)]
        command += ["--end-step", str(plan.end_step)]
        if plan.resume_from is not None:
            command += ["--resume", str(plan.resume_from)]
            if self.lossy:
                command += ["--lossy-restore", repr(self.lossy)]
        return command

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / CHECKPOINT

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        return torch.load(path, map_location="cpu", weights_only=False)


class LossyIndexAddCase(IndexAddCase):
    """The resume restores the embedding times 1 + 1e-4."""

    name = "cuda_index_add_lossy"
    lossy = 1e-4


if __name__ == "__main__":
    sys.exit(main())
