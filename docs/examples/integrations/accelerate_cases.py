"""Resume cases around train_accelerate.py on two gloo ranks: as it is, and re-seeding after load."""

from trainparity.integrations.accelerate import AccelerateCase

TWO_RANKS = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


class AccelerateResume(AccelerateCase):
    name = "accelerate_resume"
    split_step = 4
    total_step = 8
    script = [*TWO_RANKS, "train_accelerate.py", "--max-steps", "8"]


class AccelerateReseedingAfterLoad(AccelerateResume):
    script = [*AccelerateResume.script, "--reseed-after-load"]
