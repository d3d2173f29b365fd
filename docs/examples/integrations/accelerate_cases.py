"""Resume cases around train_accelerate.py on two gloo ranks: as it is, and re-seeding after load."""

from trainparity.integrations.accelerate import AccelerateCase

TWO_RANKS = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


class AccelerateResume(AccelerateCase):
    name = "accelerate_resume"
    split_step = 4
    total_step = 8
    script = [*TWO_RANKS, "train_accelerate.py", "--max-steps", "8"]


class AccelerateReseedingAfterLoad(AccelerateResume):
    """Re-seeds every rank after load_state: the restored random states are lost."""

    script = [*AccelerateResume.script, "--reseed-after-load"]


class AccelerateLoaderDrawingGlobalRNG(AccelerateResume):
    """A DataLoader without its own generator: the resumed skip_first_batches draws once more."""

    script = [*AccelerateResume.script, "--global-rng-loader"]
