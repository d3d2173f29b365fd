"""Lightning programs: ModelCheckpoint every 2 steps, auto-resume with `trainer.fit(..., ckpt_path="last")`.

The script is lightning_train.py. The case's checkpoint is the
ModelCheckpoint's whole directory: check_resume stages candidate_split's
(`epoch=0-step=2.ckpt`, `...step=4.ckpt`, `last.ckpt`) into
candidate_resume's run directory, whose run finds `last.ckpt` itself. What
is compared is the newest `last*.ckpt` of every run, which `ckpt_path="last"`
would load (`observe_lightning_checkpoint`:
weights, optimizer and scheduler states, loops, every stateful callback)
and the records of every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from benchmarks.corpus.programs.frameworks.common import resume_entry, script_command

MODULE = "benchmarks.corpus.programs.frameworks.lightning_cases"


class _LightningCase:
    name = "lightning"
    split_step = 4  # mid-epoch: 10 steps an epoch
    total_step = 8
    arguments: tuple[str, ...] = ()

    def command(self, plan) -> list[str]:
        return script_command(
            "lightning_train.py",
            [
                "--root-dir",
                str(plan.run_dir),
                "--stop-at",
                str(plan.end_step),
                "--max-steps",
                str(self.total_step),
                *self.arguments,
            ],
        )

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoints"  # ModelCheckpoint's dirpath: every .ckpt of the run

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        from trainparity.integrations.lightning import observe_lightning_checkpoint

        # The directory: what `ckpt_path="last"` would load (the newest last*.ckpt; staged into
        # another directory, ModelCheckpoint saves the next one as last-v1.ckpt beside it).
        return observe_lightning_checkpoint(path, run_dir=path.parent)


class CnnResume(_LightningCase):
    name = "pl_cnn_bn_sgd_multistep_ema"
    arguments = ("--model", "cnn")


class CnnResumeNoisy(CnnResume):
    arguments = (*CnnResume.arguments, "--noisy")


class CnnEmaCounterNotSaved(CnnResume):
    arguments = (*CnnResume.arguments, "--fault", "ema-counter-not-saved")


class MlpResume(_LightningCase):
    name = "pl_mlp_layernorm_adamw_onecycle"
    arguments = ("--model", "mlp")


class MlpResumeNoisy(MlpResume):
    arguments = (*MlpResume.arguments, "--noisy")


class MlpRngNotRestored(MlpResume):
    arguments = (*MlpResume.arguments, "--fault", "rng-not-restored")


class MlpPlainLoader(MlpResume):
    arguments = (*MlpResume.arguments, "--fault", "plain-loader")


CNN = "pl_cnn_bn_sgd_multistep_ema"
MLP = "pl_mlp_layernorm_adamw_onecycle"

ENTRIES = [
    resume_entry(
        CNN,
        f"{MODULE}:CnnResume",
        form="deterministic",
        note="Lightning, CNN with BatchNorm and dropout, SGD momentum, MultiStepLR, an EMA "
        "callback, RNG in a callback, a resumable shuffled loader, ckpt_path='last'",
    ),
    resume_entry(
        CNN,
        f"{MODULE}:CnnResumeNoisy",
        form="nondeterministic",
        note="the same, each loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpResume",
        form="deterministic",
        note="Lightning, MLP with LayerNorm, dropout and a 1-element bias, AdamW, OneCycleLR",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpResumeNoisy",
        form="nondeterministic",
        note="the same, each loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        CNN,
        f"{MODULE}:CnnEmaCounterNotSaved",
        form="deterministic",
        fault="ema_counter",
        expect_path="model_ema",
        expect_step=5,
        note="the EMA callback's state_dict omits its update count: the decay warms up again",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpRngNotRestored",
        form="deterministic",
        fault="rng",
        expect_path='model["',
        expect_step=5,
        note="the RNG callback saves torch's generator but its load_state_dict restores nothing",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpPlainLoader",
        form="deterministic",
        fault="data_position",
        expect_path='model["',
        expect_step=5,
        note="a plain shuffled DataLoader: the resumed epoch starts again at its first batch",
    ),
]
