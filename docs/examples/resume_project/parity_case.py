"""The resume case: how to run train.py in each phase, where it saves, what to compare."""

import sys
from pathlib import Path

import torch


class ResumeCase:
    name = "example_resume"
    split_step = 4  # where the interrupted run stops: mid-epoch (3 batches per epoch)
    total_step = 8  # where every run ends
    extra_arguments: list = []

    def command(self, plan):  # argv for one phase; plan: phase, cwd, run_dir, end_step, resume_from
        argv = [sys.executable, str(plan.cwd / "train.py")]
        argv += ["--checkpoint", str(self.checkpoint_path(plan.run_dir))]
        argv += ["--end-step", str(plan.end_step)]
        if plan.resume_from is not None:  # candidate_resume only: the staged split checkpoint
            argv += ["--resume", str(plan.resume_from), *self.extra_arguments]
        return argv

    def checkpoint_path(self, run_dir: Path) -> Path:  # the same answer before and after the run
        return run_dir / "checkpoint.pt"

    def observe_checkpoint(self, path: Path):  # what must match after total_step
        state = torch.load(path, map_location="cpu", weights_only=False)
        return {
            key: state[key] for key in ("model", "optimizer", "scheduler", "rng", "data", "step")
        }


class ForgetfulResumeCase(ResumeCase):
    """The same script with a resume bug: the scheduler is not restored."""

    extra_arguments = ["--forget-scheduler"]
