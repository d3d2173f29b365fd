"""`trainparity.integrations.lightning`, a public path (docs/integrations.md): re-exports."""

from trainparity._internal.integrations.lightning import LightningCase as LightningCase
from trainparity._internal.integrations.lightning import NeedsUnpickling as NeedsUnpickling
from trainparity._internal.integrations.lightning import TrainParityCallback as TrainParityCallback
from trainparity._internal.integrations.lightning import ckpt_path as ckpt_path
from trainparity._internal.integrations.lightning import (
    observe_lightning_checkpoint as observe_lightning_checkpoint,
)
from trainparity._internal.integrations.lightning import root_dir as root_dir
