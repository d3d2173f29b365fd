"""The Hugging Face Trainer with a DeepSpeed config (train_hf.py): ZeRO-2 on 2 gloo CPU ranks.

Observed by `observe_huggingface_checkpoint`: the Trainer's files and, under
its `deepspeed` key, the engine's checkpoint inside the Trainer's
(`load_deepspeed`).
"""

from trainparity.integrations.huggingface import HuggingFaceCase

TWO_RANKS = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


class TrainerDeepSpeedResumeCase(HuggingFaceCase):
    """The Hugging Face Trainer with TrainingArguments(deepspeed=...), ZeRO-2 on 2 ranks."""

    name = "example_hf_trainer_deepspeed_resume"
    split_step = 2
    total_step = 4
    script = [*TWO_RANKS, "train_hf.py", "--max-steps", "4"]


class TrainerDeepSpeedNoOptimizerStatesCase(TrainerDeepSpeedResumeCase):
    """The engine resumed without its optimizer states."""

    script = [*TrainerDeepSpeedResumeCase.script, "--fault", "no-optimizer-states"]
