"""Hugging Face Trainer programs: auto-resume from the newest `checkpoint-<N>` of the output directory.

The script (hf_trainer_train.py) is written as people write it: the Trainer
saves every 2 steps, and a run resumes with
`trainer.train(resume_from_checkpoint=True)` when the output directory
holds a checkpoint. The case's checkpoint is that whole output directory:
check_resume stages candidate_split's directory (checkpoint-2 and -4) into
candidate_resume's run directory, whose run then finds checkpoint-4 itself.
What is compared is the newest checkpoint's every file
(`observe_huggingface_checkpoint`), and the records of every step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from benchmarks.corpus.programs.frameworks.common import resume_entry, runs_entry, script_command

MODULE = "benchmarks.corpus.programs.frameworks.hf_trainer_cases"


class _TrainerCase:
    name = "hf_trainer"
    split_step = 4  # mid-epoch for both models (gpt2: 6 steps an epoch, bert: 6)
    total_step = 8
    arguments: tuple[str, ...] = ()

    def command(self, plan) -> list[str]:
        return script_command(
            "hf_trainer_train.py",
            [
                "--output-dir",
                str(self.checkpoint_path(plan.run_dir)),
                "--stop-at",
                str(plan.end_step),
                "--max-steps",
                str(self.total_step),
                *self.arguments,
            ],
        )

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "out"  # the Trainer's output_dir: every checkpoint-<N> of the run

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        from trainparity.integrations.huggingface import observe_huggingface_checkpoint

        newest = max(path.glob("checkpoint-*"), key=lambda folder: int(folder.name.split("-")[1]))
        observation = observe_huggingface_checkpoint(newest, run_dir=path.parent)
        observation.pop("not_observed", None)  # training_args.bin: configuration, named, unread
        return observation


class Gpt2Resume(_TrainerCase):
    name = "hf_gpt2_adamw_cosine_accum_clip"
    arguments = ("--model", "gpt2")


class Gpt2ResumeNoisy(Gpt2Resume):
    arguments = (*Gpt2Resume.arguments, "--noisy")


class Gpt2SchedulerFileLost(Gpt2Resume):
    arguments = (*Gpt2Resume.arguments, "--fault", "scheduler-file-lost")


class Gpt2RngFileLost(Gpt2Resume):
    arguments = (*Gpt2Resume.arguments, "--fault", "rng-file-lost")


class BertResume(_TrainerCase):
    name = "hf_bert_adafactor_linear"
    arguments = ("--model", "bert")


class BertResumeNoisy(BertResume):
    arguments = (*BertResume.arguments, "--noisy")


class BertIgnoringDataSkip(BertResume):
    arguments = (*BertResume.arguments, "--fault", "ignore-data-skip")


class Gpt2Accumulation(_TrainerCase):
    """4 microbatches of 2 against 1 batch of 8 (dropout off): the same steps, rounded otherwise."""

    name = "hf_gpt2_accumulation_4x2_vs_1x8"
    total_step = 4
    arguments = ("--model", "gpt2", "--dropout", "0")
    variants = {
        "accum4x2": {"args": ["--accum", "4", "--batch", "2"]},
        "accum1x8": {"args": ["--accum", "1", "--batch", "8"]},
    }

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        observed = super().observe_checkpoint(path)
        # What must agree: the logged losses and the training state, not the batch settings.
        return {key: observed[key] for key in ("log_history", "model", "optimizer", "scheduler")}


class Gpt2AccumulationOwnLoss(Gpt2Accumulation):
    arguments = (*Gpt2Accumulation.arguments, "--own-loss")


def _tolerance():
    from trainparity import ToleranceComparison

    # docs/integrations.md: the Trainer's accumulation equals the full batch up to rounding.
    return ToleranceComparison(rtol=1e-4, atol=1e-5)


GPT2 = "hf_gpt2_adamw_cosine_accum_clip"
BERT = "hf_bert_adafactor_linear"

ENTRIES = [
    resume_entry(
        GPT2,
        f"{MODULE}:Gpt2Resume",
        form="deterministic",
        note="Trainer, 2-layer GPT-2 with dropout, AdamW warm-up+cosine, 2 microbatches, clipping, "
        "save_steps=2, resume_from_checkpoint=True",
    ),
    resume_entry(
        GPT2,
        f"{MODULE}:Gpt2ResumeNoisy",
        form="nondeterministic",
        note="the same, each loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        BERT,
        f"{MODULE}:BertResume",
        form="deterministic",
        note="Trainer, 2-layer BERT classifier (LayerNorm, dropout), Adafactor, warm-up+linear, "
        "clipping, resume_from_checkpoint=True",
    ),
    resume_entry(
        BERT,
        f"{MODULE}:BertResumeNoisy",
        form="nondeterministic",
        note="the same, each loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        GPT2,
        f"{MODULE}:Gpt2SchedulerFileLost",
        form="deterministic",
        fault="scheduler",
        # Without scheduler.pt the Trainer loads neither scheduler nor optimizer (it needs
        # both files): the record right after loading shows the optimizer first.
        expect_path="optimizer",
        expect_step=4,
        note="scheduler.pt missing from the newest checkpoint: a fresh optimizer and schedule",
    ),
    resume_entry(
        GPT2,
        f"{MODULE}:Gpt2RngFileLost",
        form="deterministic",
        fault="rng",
        # The RNG is restored at the first resumed step; its loss shows in the dropout masks.
        expect_path="model",
        expect_step=5,
        note="rng_state.pth missing: the Trainer resumes with another RNG (an info log line)",
    ),
    resume_entry(
        BERT,
        f"{MODULE}:BertIgnoringDataSkip",
        form="deterministic",
        fault="data_position",
        expect_path="model",
        expect_step=5,
        note="ignore_data_skip=True on resume: the epoch's batches start again from the first",
    ),
    runs_entry(
        "hf_gpt2_accumulation_4x2_vs_1x8",
        f"{MODULE}:Gpt2Accumulation",
        form="deterministic",
        comparison=_tolerance,
        note="check_runs: Trainer gradient_accumulation_steps 4 x batch 2 against 1 x 8, "
        "clipping, under the tolerance docs/integrations.md declares",
    ),
    runs_entry(
        "hf_gpt2_accumulation_4x2_vs_1x8",
        f"{MODULE}:Gpt2AccumulationOwnLoss",
        form="deterministic",
        comparison=_tolerance,
        fault="loss_normalisation",
        # Adam's first update hardly sees a gradient's scale; its moments do.
        expect_path="optimizer.state",
        expect_step=1,
        note="a compute_loss of its own that ignores num_items_in_batch: 4 microbatch means "
        "summed instead of the batch's mean",
    ),
]
