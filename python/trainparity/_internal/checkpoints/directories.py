"""load_checkpoint_directory: a checkpoint directory read by the reader its layout calls for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainparity._internal.checkpoints.dcp import load_dcp
from trainparity._internal.checkpoints.deepspeed_universal import (
    is_deepspeed_universal_checkpoint,
    load_deepspeed_universal,
)
from trainparity._internal.checkpoints.deepspeed_zero import is_deepspeed_checkpoint, load_deepspeed
from trainparity._internal.checkpoints.safetensors_files import (
    is_safetensors_directory,
    load_safetensors,
)

__all__ = ["load_checkpoint_directory"]


def load_checkpoint_directory(
    path: str | os.PathLike[str], *, mmap: bool = False
) -> dict[str, Any]:
    """The state saved in directory `path`: a DCP directory (`.metadata`) through load_dcp,
    a DeepSpeed ZeRO directory (a `latest` file or a `<tag>/mp_rank_00_model_states.pt`)
    through load_deepspeed, a DeepSpeed universal checkpoint (`latest_universal` without
    `latest`, or a tag directory with `zero/optimizer_state.pt`) through
    load_deepspeed_universal, a directory of `.safetensors` files through load_safetensors
    (always mapped), any other through load_dcp too, whose FileNotFoundError says
    what a DCP directory lacks. `mmap=True`: load_dcp maps its shard files (see load_dcp)."""
    directory = Path(path)
    if not (directory / ".metadata").is_file():
        # Before the ZeRO test: a universal tag directory holds the ZeRO run's model states too.
        if is_deepspeed_universal_checkpoint(directory):
            return load_deepspeed_universal(directory)
        if is_deepspeed_checkpoint(directory):
            return load_deepspeed(directory)
        if is_safetensors_directory(directory):
            return load_safetensors(directory)
    return load_dcp(directory, mmap=mmap)
