"""Readers for checkpoint formats that observe_checkpoint receives (DCP and DeepSpeed ZeRO
directories, DeepSpeed universal checkpoints, safetensors files and directories of them)."""

from trainparity.checkpoints.dcp import load_dcp
from trainparity.checkpoints.deepspeed import load_deepspeed
from trainparity.checkpoints.deepspeed_universal import load_deepspeed_universal
from trainparity.checkpoints.directories import load_checkpoint_directory
from trainparity.checkpoints.safetensors_files import load_safetensors

__all__ = [
    "load_checkpoint_directory",
    "load_dcp",
    "load_deepspeed",
    "load_deepspeed_universal",
    "load_safetensors",
]
