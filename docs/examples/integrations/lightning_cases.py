"""Resume cases around train_lightning.py: the script as it is, and a callback that forgets its state."""

from trainparity.integrations.lightning import LightningCase


class LightningResume(LightningCase):
    name = "lightning_resume"
    split_step = 8  # an epoch boundary: a plain DataLoader cannot resume mid-epoch
    total_step = 12
    script = ["train_lightning.py", "--max-steps", "12"]


class LightningForgettingCallbackState(LightningResume):
    script = [*LightningResume.script, "--forget-callback-state"]


class LightningResumeMidEpoch(LightningResume):
    """Split in the middle of an epoch, with a DataLoader that cannot say where it was."""

    split_step = 4
