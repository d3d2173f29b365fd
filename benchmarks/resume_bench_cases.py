"""Resume cases for bench_resume.py; importable by trainparity and by TrainParity 0.1.0 alike."""

import os
import sys
from pathlib import Path

import torch

WIDTH = int(os.environ.get("BENCH_RESUME_WIDTH", "4096"))
DEPTH = int(os.environ.get("BENCH_RESUME_DEPTH", "5"))


def _model() -> torch.nn.Module:
    layers = []
    for _ in range(DEPTH):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def train(checkpoint: Path, end_step: int, resume: Path | None) -> None:
    torch.manual_seed(3)
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    step = 0
    if resume is not None:
        state = torch.load(resume, map_location="cpu", weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"])
        step = state["step"]
    while step < end_step:
        batch = torch.randn(8, WIDTH)
        loss = model(batch).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "step": step,
    }
    torch.save(state, checkpoint)


class WideMLPCase:
    """A wide MLP with Adam: the observed state (weights + two Adam moments) is about 1 GiB."""

    name = "bench_wide_mlp"
    split_step = 1
    total_step = 2

    def command(self, plan):
        argv = [
            sys.executable,
            str(Path(__file__).resolve()),
            str(plan.run_dir / "checkpoint.pt"),
            str(plan.end_step),
        ]
        if plan.resume_from is not None:
            argv.append(str(plan.resume_from))
        return argv

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint.pt"

    def observe_checkpoint(self, path: Path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        return {
            "model": state["model"],
            "optimizer": state["optimizer"],
            "rng": state["rng"],
            "step": state["step"],
        }


if __name__ == "__main__":
    torch.set_num_threads(1)
    train(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]) if len(sys.argv) > 3 else None)
