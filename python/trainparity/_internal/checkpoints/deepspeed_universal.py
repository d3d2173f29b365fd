"""load_deepspeed_universal: a DeepSpeed universal checkpoint directory read by parameter name.

`deepspeed.checkpoint.ds_to_universal --input_folder ck/global_stepN --output_folder
OUT/global_stepN` turns a ZeRO checkpoint into one that any world size can load
(`"checkpoint": {"load_universal": true}`): `OUT/latest_universal` names the tag, and
`OUT/<tag>/` holds the saving run's `mp_rank_00_model_states.pt` as it was (module,
scheduler, counters, client state), `zero/optimizer_state.pt` (the optimizer's
param_groups and ZeRO's loss-scaler fields) and, per parameter name,
`zero/<name>/fp32.pt`, `exp_avg.pt`, `exp_avg_sq.pt` (each `{"param": tensor, ...}`,
the whole parameter) and `step.pt`. Read here into the same dict that load_deepspeed
gives for a ZeRO directory, so a universal checkpoint compares with the ZeRO
checkpoint it came from, or with one saved at another world size, on names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trainparity._internal.checkpoints.deepspeed_zero import (
    _ENGINE_KEYS,
    MODEL_FILE,
    _deepspeed_classes_allowed,
    _load,
    _world_size,
    _zero_fields,
    tag_directory_named,
)

__all__ = ["is_deepspeed_universal_checkpoint", "load_deepspeed_universal"]

LATEST_FILE = "latest_universal"
OPTIMIZER_FILE = Path("zero") / "optimizer_state.pt"


def is_deepspeed_universal_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a universal checkpoint: a directory with `latest_universal` and no
    `latest` (a ZeRO checkpoint with a conversion beside it is read as the ZeRO one), or
    a tag directory holding `zero/optimizer_state.pt`."""
    directory = Path(path)
    if not directory.is_dir():
        return False
    if (directory / OPTIMIZER_FILE).is_file():
        return True
    return (directory / LATEST_FILE).is_file() and not (directory / "latest").is_file()


def load_deepspeed_universal(
    path: str | os.PathLike[str], *, tag: str | None = None, weights_only: bool = True
) -> dict[str, Any]:
    """The state in universal checkpoint directory `path`, as load_deepspeed gives a ZeRO one.

    `path` is the directory holding `latest_universal` (the tag is read from it unless
    `tag` names one) or a tag directory itself. The result has load_deepspeed's keys:
    `module`, `fp32` and `optimizer` (`state` and `param_groups`) by parameter name,
    `lr_scheduler`, `client_state`, `global_steps`, `skipped_steps`, `global_samples`,
    `zero` (stage, the saving run's partition count, loss scaler) and `ds_config`. A
    missing tag directory, optimizer file or parameter file is a FileNotFoundError
    that names it. `weights_only=False` lets other classes be unpickled (only for
    checkpoints you trust).
    """
    tag_directory = _tag_directory(Path(path), tag)
    for needed in (MODEL_FILE, OPTIMIZER_FILE):
        if not (tag_directory / needed).is_file():
            raise FileNotFoundError(
                f"{str(tag_directory / needed)!r} is missing: {str(tag_directory)!r} is not a "
                "complete universal checkpoint (ds_to_universal writes the parameters' files, "
                "then zero/optimizer_state.pt, then the model states: was it interrupted?)"
            )
    with _deepspeed_classes_allowed():
        model_states = _load(tag_directory / MODEL_FILE, weights_only)
        optimizer_state = _load(tag_directory / OPTIMIZER_FILE, weights_only)
    names_by_group = [list(shapes) for shapes in model_states["param_shapes"]]
    fp32, state = _parameters(tag_directory / "zero", names_by_group, weights_only)
    buffer_names = set(model_states.get("buffer_names") or ())
    buffers = {
        name: value.float() if value.is_floating_point() else value
        for name, value in model_states["module"].items()
        if name in buffer_names
    }
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": names_by_group[index]}
        for index, group in enumerate(optimizer_state["param_groups"])
    ]
    stage = int(optimizer_state["zero_stage"])
    return {
        "module": dict(model_states["module"]),
        "fp32": {**buffers, **fp32},
        "optimizer": {"state": state, "param_groups": groups},
        "lr_scheduler": model_states.get("lr_scheduler"),
        "client_state": {
            key: value for key, value in model_states.items() if key not in _ENGINE_KEYS
        },
        "global_steps": model_states.get("global_steps"),
        "skipped_steps": model_states.get("skipped_steps"),
        "global_samples": model_states.get("global_samples"),
        "zero": _zero_fields(
            optimizer_state, stage, _world_size(optimizer_state["partition_count"])
        ),
        "ds_config": model_states.get("ds_config"),
    }


def _tag_directory(directory: Path, tag: str | None) -> Path:
    if tag is None and (directory / OPTIMIZER_FILE).is_file():
        return directory  # a tag directory itself
    return tag_directory_named(
        directory,
        tag,
        latest_name=LATEST_FILE,
        what="universal checkpoint",
        not_one="a universal checkpoint directory (ds_to_universal writes latest_universal "
        "beside its output folder)",
        read_from=LATEST_FILE,
    )


def _parameters(
    zero_directory: Path, names_by_group: list[list[str]], weights_only: bool
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """fp32 weights and optimizer state by name from each parameter's own files.

    Every state file of a parameter's directory is read (its names are the optimizer's:
    exp_avg, exp_avg_sq, step for Adam), fp32.pt being the master weight.
    """
    fp32: dict[str, Any] = {}
    state: dict[str, dict[str, Any]] = {}
    for name in (name for names in names_by_group for name in names):
        directory = zero_directory / name
        if not (directory / "fp32.pt").is_file():
            raise FileNotFoundError(
                f"{str(directory / 'fp32.pt')!r} is missing: parameter {name!r} of the model "
                "states has no fp32 weight in this universal checkpoint"
            )
        state[name] = {}
        for file in sorted(directory.glob("*.pt")):
            value = _load(file, weights_only)
            # ds_to_universal saves tensors as {"param": tensor, "cat_dim": ...}, the step bare.
            value = value["param"] if isinstance(value, dict) else value
            if file.stem == "fp32":
                fp32[name] = value
            else:
                state[name][file.stem] = value
    return fp32, state
