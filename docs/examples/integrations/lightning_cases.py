"""Lightning resume cases: train_lightning.py on one process and on two DDP ranks, faults, findings."""

from trainparity.integrations.lightning import LightningCase

TWO_RANKS = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


class LightningResume(LightningCase):
    name = "lightning_resume"
    split_step = 4  # mid-epoch (8 batches an epoch): the loader says where it was
    total_step = 12
    script = ["train_lightning.py", "--max-steps", "12"]


class LightningForgettingCallbackState(LightningResume):
    """SamplesSeen.load_state_dict restores nothing."""

    script = [*LightningResume.script, "--forget-callback-state"]


class LightningPlainLoaderMidEpoch(LightningResume):
    """A plain DataLoader cannot say where it was: the resumed epoch starts from its first batch."""

    script = [*LightningResume.script, "--plain-loader"]


class LightningSplitAtEpochEnd(LightningResume):
    """Split on an epoch's last batch: Lightning 2.6.6 restores the loop counters differently."""

    split_step = 8


class LightningResumeTwoRanks(LightningCase):
    name = "lightning_resume_two_ranks"
    split_step = 2
    total_step = 4
    script = [*TWO_RANKS, "train_lightning.py", "--max-steps", "4", "--devices", "2"]
