"""Accelerate programs: `save_state()` every 2 steps with automatic naming, `load_state()` of the newest.

The script is accelerate_train.py. The case's checkpoint is the project
directory: check_resume stages candidate_split's `checkpoints/checkpoint_0`
and `_1` into candidate_resume's run directory, whose run loads the newest
itself. What is compared is the newest `checkpoint_<i>` of every run
(`observe_accelerate_checkpoint`: model, optimizer, scheduler, random
states, every registered object), the records of every step, and the
sample IDs trained on (`track_ids`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from benchmarks.corpus.programs.frameworks.common import resume_entry, script_command

MODULE = "benchmarks.corpus.programs.frameworks.accelerate_cases"


class _AccelerateCase:
    name = "accelerate"
    split_step = 4  # mid-epoch: 6 steps an epoch
    total_step = 8
    arguments: tuple[str, ...] = ()

    def command(self, plan) -> list[str]:
        return script_command(
            "accelerate_train.py",
            [
                "--project-dir",
                str(self.checkpoint_path(plan.run_dir)),
                "--stop-at",
                str(plan.end_step),
                "--max-steps",
                str(self.total_step),
                *self.arguments,
            ],
        )

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "project"  # ProjectConfiguration's project_dir: checkpoints/checkpoint_<i>

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        from trainparity.integrations.accelerate import observe_accelerate_checkpoint

        newest = max(
            (path / "checkpoints").glob("checkpoint_*"),
            key=lambda folder: int(folder.name.split("_")[1]),
        )
        return observe_accelerate_checkpoint(newest, run_dir=path.parent)


class EncoderResume(_AccelerateCase):
    name = "accelerate_encoder_adamw_accum_clip_ema"
    arguments = ("--model", "encoder")


class EncoderResumeNoisy(EncoderResume):
    arguments = (*EncoderResume.arguments, "--noisy")


class EncoderEmaNotRegistered(EncoderResume):
    arguments = (*EncoderResume.arguments, "--fault", "ema-not-registered")


class EncoderPositionNotSkipped(EncoderResume):
    arguments = (*EncoderResume.arguments, "--fault", "position-not-skipped")


class MlpResume(_AccelerateCase):
    name = "accelerate_mlp_sgd_nesterov_accum_clip_ema"
    arguments = ("--model", "mlp")


class MlpResumeNoisy(MlpResume):
    arguments = (*MlpResume.arguments, "--noisy")


class MlpSchedulerNotPrepared(MlpResume):
    arguments = (*MlpResume.arguments, "--fault", "scheduler-not-prepared")


ENCODER = "accelerate_encoder_adamw_accum_clip_ema"
MLP = "accelerate_mlp_sgd_nesterov_accum_clip_ema"

ENTRIES = [
    resume_entry(
        ENCODER,
        f"{MODULE}:EncoderResume",
        form="deterministic",
        note="Accelerate loop, TransformerEncoderLayer classifier, AdamW warm-up+cosine, "
        "2 microbatches, clipping, a registered EMA, counter and epoch order, skip_first_batches",
    ),
    resume_entry(
        ENCODER,
        f"{MODULE}:EncoderResumeNoisy",
        form="nondeterministic",
        note="the same, each loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpResume",
        form="deterministic",
        note="Accelerate loop, MLP with dropout and a 1-element bias, SGD Nesterov, "
        "2 microbatches, clipping, registered EMA",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpResumeNoisy",
        form="nondeterministic",
        note="the same, each loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        ENCODER,
        f"{MODULE}:EncoderEmaNotRegistered",
        form="deterministic",
        fast=True,  # about 25 s; its round trip also checks every other restored part
        fault="ema_counter",
        expect_path="model_ema",
        expect_step=4,  # the record right after loading: a fresh EMA, its count 0
        note="the EMA is not registered with register_for_checkpointing: a resume restarts it",
    ),
    resume_entry(
        ENCODER,
        f"{MODULE}:EncoderPositionNotSkipped",
        form="deterministic",
        fault="data_position",
        expect_path="coverage.epoch0.rank0",
        expect_step=5,
        note="no skip_first_batches: the resumed epoch trains on its first batches again",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpSchedulerNotPrepared",
        form="deterministic",
        fault="scheduler",
        expect_path="scheduler",
        expect_step=4,
        note="the scheduler is stepped by hand, never passed to prepare: save_state skips it",
    ),
]
