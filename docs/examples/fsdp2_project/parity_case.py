"""The FSDP2 resume cases: torchrun per phase on `plan.world_size` ranks (2 by default), a DCP directory.

The 2-D cases (TwoDimResumeCase and below) run 4 ranks on a ("dp", "tp")
mesh or HSDP (layouts.py).

With FSDP2_EXAMPLE_LAUNCHER=fork (run_parity.py --fork-ranks) a phase is
`python train.py --fork-ranks N` instead: one process that forks its ranks.
"""

import os
import sys
from pathlib import Path

import torch
from trainparity.checkpoints import load_dcp
from trainparity.distributed import torchrun_command

RANKS = 2
LAUNCHER_VARIABLE = "FSDP2_EXAMPLE_LAUNCHER"


class FsdpResumeCase:
    name = "example_fsdp2_resume"
    split_step = 2
    total_step = 4
    fault = None
    layout_arguments: tuple[str, ...] = ()  # train.py's --layout and what goes with it
    rank_count = RANKS

    def command(self, plan):
        script = [
            str(plan.cwd / "train.py"),
            "--checkpoint",
            str(self.checkpoint_path(plan.run_dir)),
            "--end-step",
            str(plan.end_step),
        ]
        if plan.resume_from is not None:
            script += ["--resume", str(plan.resume_from)]
        script += self.layout_for(plan)
        if self.fault is not None:
            script += ["--fault", self.fault]
        if os.environ.get(LAUNCHER_VARIABLE) == "fork":
            return [sys.executable, *script, "--fork-ranks", str(self.ranks(plan))]
        return torchrun_command(
            script, nproc_per_node=self.ranks(plan), log_dir=plan.run_dir / "ranks"
        )

    def layout_for(self, plan) -> tuple[str, ...]:
        return self.layout_arguments

    def ranks(self, plan) -> int:
        # check_resume(world_sizes=...) sets plan.world_size per phase: an elastic resume.
        return plan.world_size or self.rank_count

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint"  # a DCP directory, written by every rank

    def observe_checkpoint(self, path: Path):
        state = load_dcp(path)  # global tensors, whatever the world size that saved them
        # Counted per rank by definition (the per-rank faults misuse it): not training state.
        del state["train"]["samples_per_rank"]
        # The noise generator is the same on every rank: rank 0's file holds it.
        state["rng"] = torch.load(path / "rng-rank0.pt", weights_only=True)
        return state


class FreshOptimizerLoadCase(FsdpResumeCase):
    """dcp.load into a fresh optimizer.state_dict(): AdamW's moments are lost."""

    fault = "fresh-optimizer-load"


class UnevenShardOffsetsCase(FsdpResumeCase):
    """Embedding(257, 8) restored by hand at rank * (257 // W): only the last rank's shard shifts."""

    fault = "uneven-shard-offsets"


class CachedStateDictHookCase(FsdpResumeCase):
    """A state dict cached at start plus a copying state_dict hook: the initial weights are saved."""

    fault = "cached-state-dict-hook"


class SchedulerNotRestoredCase(FsdpResumeCase):
    """The LR scheduler starts its warm-up again."""

    fault = "scheduler-not-restored"


class ElasticChainCase(FsdpResumeCase):
    """A chain: split at 2 and 3 (run it with world sizes, e.g. 2,3,1: saved on 2 ranks,
    resumed on 3 and saved again, resumed on 1)."""

    split_steps = (2, 3)


class PerRankSamplerPositionCase(FsdpResumeCase):
    """Elastic: the data position kept in per-rank units, multiplied by the new rank count."""

    fault = "per-rank-sampler-position"


class PerRankStepCounterCase(FsdpResumeCase):
    """Elastic: the step recounted from this rank's samples at the new local batch size."""

    fault = "per-rank-step-counter"


class OptimizerDroppedOnReshardCase(FsdpResumeCase):
    """Elastic: only the model is loaded when the world size changed."""

    fault = "optimizer-dropped-on-reshard"


class WorldSizeRunsCase(FsdpResumeCase):
    """check_runs: the same training on 2 ranks and on 1, gradients recorded."""

    name = "example_fsdp2_world_sizes"
    total_step = 3
    variants = {
        "ranks2": {"args": ["--record-gradients"]},
        "ranks1": {"args": ["--record-gradients"]},
    }

    def ranks(self, plan) -> int:
        # phase: <variant>_<a|b>, the variant named ranks<N>[_what]
        return int(plan.phase.split("_")[0].removeprefix("ranks"))


class SummedGradientsRunsCase(WorldSizeRunsCase):
    """check_runs: 1 rank, then 2 ranks, then 2 ranks whose gradients are summed, not averaged.

    Each variant is compared with the first: the clean 2 ranks agree with 1,
    the summed ones FAIL (the report's variant_comparisons lists both).
    """

    variants = {
        "ranks1": {"args": ["--record-gradients"]},
        "ranks2": {"args": ["--record-gradients"]},
        "ranks2_summed": {"args": ["--record-gradients", "--fault", "sum-gradients"]},
    }


TWO_D = ("--layout", "dp-tp", "--global-batch", "12", "--dropout")


class TwoDimResumeCase(FsdpResumeCase):
    """FSDP2 x TP on a 2x2 ("dp", "tp") mesh: model, optimizer, scheduler, data, dropout RNG."""

    name = "example_fsdp2_tp_resume"
    rank_count = 4
    layout_arguments = TWO_D


class HsdpResumeCase(TwoDimResumeCase):
    """HSDP: fully_shard on a 2x2 ("replicate", "shard") mesh."""

    name = "example_hsdp_resume"
    layout_arguments = ("--layout", "hsdp", "--global-batch", "12", "--dropout")


class TpOptimizerDroppedCase(TwoDimResumeCase):
    """The moments of the tensor-parallel parameters are left out of the load."""

    fault = "tp-optimizer-dropped"


class EmbeddingReplicatedOnLoadCase(TwoDimResumeCase):
    """The resumed run leaves the embedding out of the TP plan: Shard(0) over "tp" becomes Replicate."""

    fault = "embedding-replicated-on-load"


class LayoutChangeCase(TwoDimResumeCase):
    """Saved on one 4-rank layout, resumed on another (check_resume(layouts=...)).

    `dp4`: FSDP2 over 4 ranks; `dp2xtp2`: FSDP2 x TP on a 2x2 ("dp", "tp")
    mesh. No dropout: a mask drawn for 16 columns on one layout and for 8 on
    the other are different random streams.
    """

    name = "example_fsdp2_layout_change"
    LAYOUTS = {"dp4": ("--layout", "dp"), "dp2xtp2": ("--layout", "dp-tp")}

    def layout_for(self, plan) -> tuple[str, ...]:
        # check_resume(layouts=...) sets plan.layout per phase (the baselines run on the first).
        return (*self.LAYOUTS[plan.layout or "dp2xtp2"], "--global-batch", "12")


class MomentsZeroedOnReshardCase(LayoutChangeCase):
    """Layout change: the resharded optimizer moments are loaded as zeros."""

    fault = "moments-zeroed-on-reshard"


class LayoutPerRankSamplerPositionCase(LayoutChangeCase):
    """Layout change: the data position kept per rank, times the new data-parallel size."""

    fault = "per-rank-sampler-position"


class TpRngNotRestoredCase(TwoDimResumeCase):
    """The second TP rank of each group does not restore its dropout generator."""

    fault = "tp-rng-not-restored"
