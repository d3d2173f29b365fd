"""The resume case: how to run train.py for each phase, where it saves, what to compare."""

import sys
from pathlib import Path

import torch


class ResumeCase:
    name = "example_resume"
    split_step = 2
    total_step = 4
    extra_arguments: list = []

    def command(self, plan):
        argv = [sys.executable, str(plan.cwd / "train.py")]
        argv += [
            "--checkpoint",
            str(self.checkpoint_path(plan.run_dir)),
            "--end-step",
            str(plan.end_step),
        ]
        if plan.resume_from is not None:
            argv += ["--resume", str(plan.resume_from), *self.extra_arguments]
        return argv

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint.pt"

    def observe_checkpoint(self, path: Path):
        state = torch.load(path, map_location="cpu", weights_only=False)
        return {key: state[key] for key in ("model", "optimizer", "scheduler", "rng", "step")}


class ForgetfulResumeCase(ResumeCase):
    """The same script with a resume bug: the scheduler is not restored."""

    extra_arguments = ["--forget-scheduler"]
