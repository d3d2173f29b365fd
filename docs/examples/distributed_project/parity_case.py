"""The 2-rank resume case: torchrun per phase, a DCP checkpoint directory, what to compare."""

from pathlib import Path

import torch

from trainparity.checkpoints import load_dcp
from trainparity.distributed import torchrun_command

RANKS = 2


class DistributedResumeCase:
    name = "example_distributed_resume"
    split_step = 1  # mid-epoch: the resumed run must also restore its place in the epoch
    total_step = 4  # two epochs of two optimizer steps
    extra_arguments: list = []

    def command(self, plan):
        script = [
            str(plan.cwd / "train.py"),
            "--checkpoint",
            str(self.checkpoint_path(plan.run_dir)),
            "--end-step",
            str(plan.end_step),
        ]
        if plan.resume_from is not None:
            script += ["--resume", str(plan.resume_from), *self.extra_arguments]
        # A private rendezvous on a kernel-assigned loopback port; per-rank logs in the phase dir.
        return torchrun_command(script, nproc_per_node=RANKS, log_dir=plan.run_dir / "ranks")

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint"  # a DCP directory

    def observe_checkpoint(self, path: Path):
        state = load_dcp(path)  # model, optim, train: read from the directory, no process group
        state["rng"] = {f"rank{rank}": _rng(path / f"rng-rank{rank}.pt") for rank in range(RANKS)}
        return state


def _rng(path: Path):
    """One rank's RNG file; Python's 625-word state as one tensor, so it differs as one path."""
    saved = torch.load(path, weights_only=True)
    version, words, gauss = saved["python"]
    return {"torch_cpu": saved["torch_cpu"], "python": torch.tensor(words), "python_gauss": gauss}


class RngFromOtherRankCase(DistributedResumeCase):
    """Resume bug: each rank restores the RNG file of the next rank."""

    extra_arguments = ["--fault-rng-from-other-rank"]


class FreshOptimizerLoadCase(DistributedResumeCase):
    """Resume bug: dcp.load into a fresh optimizer's state_dict(); the moments are lost."""

    extra_arguments = ["--fault-fresh-optimizer-load"]


class RestartEpochCase(DistributedResumeCase):
    """Resume bug: the sampler starts the interrupted epoch again (repeats samples)."""

    extra_arguments = ["--fault-restart-epoch"]


class SkipOptimizerStepsCase(DistributedResumeCase):
    """Resume bug: fast-forwards by optimizer steps instead of batches (accumulation 2)."""

    extra_arguments = ["--fault-skip-optimizer-steps"]
