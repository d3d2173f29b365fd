"""load_checkpoint_directory: a checkpoint directory read by the reader its layout calls for."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainparity.checkpoints.dcp import load_dcp
from trainparity.checkpoints.deepspeed import is_deepspeed_checkpoint, load_deepspeed

__all__ = ["load_checkpoint_directory"]


def load_checkpoint_directory(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The state saved in directory `path`: a DCP directory (`.metadata`) through load_dcp,
    a DeepSpeed ZeRO directory (a `latest` file or a `<tag>/mp_rank_00_model_states.pt`)
    through load_deepspeed, any other through load_dcp too, whose FileNotFoundError says
    what a DCP directory lacks."""
    directory = Path(path)
    if not (directory / ".metadata").is_file() and is_deepspeed_checkpoint(directory):
        return load_deepspeed(directory)
    return load_dcp(directory)
