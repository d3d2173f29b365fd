"""The DeepSpeed resume cases: torchrun per phase on 2 gloo CPU ranks, a ZeRO checkpoint directory.

The Hugging Face Trainer's cases are in hf_cases.py.

The script records the engine's state after loading and after every step
(`trainparity.integrations.deepspeed.engine_state`), so a fault FAILs at
the step where the resumed run first parts from the uninterrupted one; the
final checkpoints are compared too, read by `load_deepspeed` (module, fp32
master weights and optimizer state by name, scheduler, counters).
"""

from pathlib import Path

from trainparity.checkpoints import load_deepspeed
from trainparity.distributed import torchrun_command

RANKS = 2


class DeepSpeedResumeCase:
    """ZeRO-2, AdamW, WarmupLR: a clean resume at step 2 of 5."""

    name = "example_deepspeed_zero2_resume"
    split_step = 2
    total_step = 5
    stage = 2
    fault = None

    def command(self, plan):
        script = [
            str(plan.cwd / "train.py"),
            *("--checkpoint", str(self.checkpoint_path(plan.run_dir))),
            *("--end-step", str(plan.end_step), "--stage", str(self.stage)),
        ]
        if plan.resume_from is not None:
            script += ["--resume", str(plan.resume_from)]
        if self.fault is not None:
            script += ["--fault", self.fault]
        return torchrun_command(script, nproc_per_node=RANKS, log_dir=plan.run_dir / "ranks")

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint"  # engine.save_checkpoint's directory: global_step{N}/, latest

    def observe_checkpoint(self, path: Path):
        return load_deepspeed(path)


class Zero3ResumeCase(DeepSpeedResumeCase):
    """The same training under ZeRO-3: parameters partitioned too."""

    name = "example_deepspeed_zero3_resume"
    stage = 3


class NoOptimizerStatesCase(DeepSpeedResumeCase):
    """load_checkpoint(load_optimizer_states=False): AdamW's moments and step count are lost."""

    fault = "no-optimizer-states"


class NoLrSchedulerStatesCase(DeepSpeedResumeCase):
    """load_checkpoint(load_lr_scheduler_states=False): WarmupLR starts its warm-up again."""

    fault = "no-lr-scheduler-states"


class ModuleOnlyCase(DeepSpeedResumeCase):
    """load_checkpoint(load_module_only=True): only the weights; counters, optimizer, scheduler restart."""

    fault = "module-only"


class DataPositionNotSavedCase(DeepSpeedResumeCase):
    """The data loader starts over after the resume: its first samples are trained on again."""

    fault = "data-position-not-saved"


class ConfigLrAfterLoadCase(DeepSpeedResumeCase):
    """The configured learning rate put back over the restored one (DeepSpeed#4344's class)."""

    fault = "config-lr-after-load"


class ClientSchedulerNotGivenCase(DeepSpeedResumeCase):
    """A warm-up LambdaLR that deepspeed.initialize is not given: restarts (DeepSpeed#3875)."""

    fault = "client-scheduler-not-given"


class Zero3NoOptimizerStatesCase(Zero3ResumeCase):
    """ZeRO-3 with load_optimizer_states=False."""

    fault = "no-optimizer-states"


class Zero3ConfigLrAfterLoadCase(Zero3ResumeCase):
    """ZeRO-3 with the configured learning rate put back after loading."""

    fault = "config-lr-after-load"
