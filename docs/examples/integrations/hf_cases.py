"""Resume cases around train_hf.py on one process and on two DDP ranks, and accumulation variants."""

from trainparity.integrations.huggingface import HuggingFaceCase

TWO_RANKS = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


class TrainerResume(HuggingFaceCase):
    name = "hf_trainer_resume"
    split_step = 4
    total_step = 8
    script = ["train_hf.py", "--max-steps", "8"]


class TrainerIgnoringDataSkip(TrainerResume):
    """Resumes at the right step but restarts the epoch's data from its first batch."""

    script = [*TrainerResume.script, "--ignore-data-skip"]


class TrainerSavingOnlyTheModel(TrainerResume):
    """save_only_model=True: checkpoints without optimizer, scheduler or RNG state."""

    script = [*TrainerResume.script, "--save-only-model"]


class TrainerAccumulation(HuggingFaceCase):
    """The same 8-sequence optimizer steps as 4 microbatches of 2 or 1 batch of 8 (for check_runs)."""

    name = "hf_trainer_accumulation"
    total_step = 4
    script = ["train_hf.py", "--max-steps", "4", "--dropout", "0"]
    variants = {
        "accum4x2": {"args": ["--accum", "4", "--batch", "2"]},
        "accum1x8": {"args": ["--accum", "1", "--batch", "8"]},
    }

    def observe_checkpoint(self, path):
        observed = super().observe_checkpoint(path)
        # What must agree: the logged losses and the training state, not the batch-size settings.
        return {key: observed[key] for key in ("log_history", "model", "optimizer", "scheduler")}


class TrainerResumeTwoRanks(HuggingFaceCase):
    name = "hf_trainer_resume_two_ranks"
    split_step = 2
    total_step = 4
    script = [*TWO_RANKS, "train_hf.py", "--max-steps", "4", "--batch", "2"]


class TrainerLosingRankOneRNG(TrainerResumeTwoRanks):
    """The resumed run finds no rng_state_1.pth: rank 1 goes on without its RNG state."""

    script = [*TrainerResumeTwoRanks.script, "--lose-rank1-rng"]
