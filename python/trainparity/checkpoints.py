"""`trainparity.checkpoints`: readers for checkpoint formats (DCP, DeepSpeed ZeRO and universal, safetensors)."""

from trainparity._internal.checkpoints.dcp import load_dcp
from trainparity._internal.checkpoints.deepspeed_universal import load_deepspeed_universal
from trainparity._internal.checkpoints.deepspeed_zero import load_deepspeed
from trainparity._internal.checkpoints.directories import load_checkpoint_directory
from trainparity._internal.checkpoints.safetensors_files import load_safetensors

__all__ = [
    "load_checkpoint_directory",
    "load_dcp",
    "load_deepspeed",
    "load_deepspeed_universal",
    "load_safetensors",
]
