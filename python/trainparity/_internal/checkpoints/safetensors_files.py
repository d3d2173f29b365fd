"""load_safetensors: a `.safetensors` file, or a directory of them, as one dict of mapped tensors.

safetensors' own reader maps the file copy-on-write (`load_file` builds its
tensors on `torch.UntypedStorage.from_file`), so no tensor byte is read
here, and a snapshot of the state refers to the file's byte ranges instead
of copying them (state/snapshot_references.py). A directory is what a sharded
model is saved as (`model-00001-of-00002.safetensors`, ... beside a
`model.safetensors.index.json`): every `.safetensors` file in it, its keys
merged. A directory that holds anything else (a trainer's `optimizer.pt`,
`trainer_state.json`, `rng_state.pth`) is not one: reading only its
weights would leave the rest of the state unobserved, so the default
observer refuses it and asks for an observer of the user's own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["SAFETENSORS_SUFFIX", "is_safetensors_directory", "load_safetensors"]

SAFETENSORS_SUFFIX = ".safetensors"
_INDEX_SUFFIX = ".safetensors.index.json"  # which file holds which key: no state of its own


def is_safetensors_directory(path: str | os.PathLike[str]) -> bool:
    """Whether directory `path` holds `.safetensors` files and nothing else but their index."""
    directory = Path(path)
    if not directory.is_dir():
        return False
    names = [entry.name for entry in directory.iterdir()]
    return any(name.endswith(SAFETENSORS_SUFFIX) for name in names) and all(
        name.endswith((SAFETENSORS_SUFFIX, _INDEX_SUFFIX)) for name in names
    )


def load_safetensors(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The tensors of safetensors file `path`, or of every `.safetensors` file in directory `path`.

    Tensors are copy-on-write views of their files: the files must stay in
    place and unchanged while the state is in use. A key found in two files
    is a ValueError (the shards of one model do not overlap). Needs the
    `safetensors` package.
    """
    try:
        from safetensors.torch import load_file
    except ImportError as error:
        raise ImportError(
            f"reading {os.fspath(path)!r} needs the safetensors package: pip install safetensors"
        ) from error
    source = Path(path)
    files = sorted(_files(source)) if source.is_dir() else [source]
    if not files:
        raise FileNotFoundError(f"{str(source)!r} holds no {SAFETENSORS_SUFFIX} file")
    state: dict[str, Any] = {}
    where: dict[str, Path] = {}
    for file in files:
        for key, tensor in load_file(str(file), device="cpu").items():
            if key in state:
                raise ValueError(
                    f"tensor {key!r} is in both {where[key].name} and {file.name} under "
                    f"{source}: a sharded model's files hold disjoint keys; remove the stale file"
                )
            state[key], where[key] = tensor, file
    return state


def _files(directory: Path) -> list[Path]:
    return [
        entry
        for entry in directory.iterdir()
        if entry.name.endswith(SAFETENSORS_SUFFIX) and entry.is_file()
    ]
