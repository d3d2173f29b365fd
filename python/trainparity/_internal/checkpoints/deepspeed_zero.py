"""load_deepspeed: a DeepSpeed ZeRO (stage 1, 2 or 3) checkpoint directory read in one process.

`engine.save_checkpoint(dir)` writes `dir/latest` (the newest tag) and
`dir/<tag>/`: the module state and DeepSpeed's own counters in
`mp_rank_00_model_states.pt` (stage 3: one `zero_pp_rank_R_mp_rank_00_model_states.pt`
per rank), and each rank's flat fp32 partition of the parameters with the
optimizer's state over that partition in `zero_pp_rank_R_mp_rank_00_optim_states.pt`.
The named tensors are put back together by DeepSpeed's own `zero_to_fp32`
merge functions (imported, not copied): once for the fp32 master weights and
once per optimizer state tensor (`exp_avg`, `exp_avg_sq`), which lie in the
same flat layout. Files are read with `torch.load(weights_only=True)`,
allowing only DeepSpeed's few checkpoint classes, and memory-mapped, so each
byte is read once. The package is imported here, lazily, and nowhere else in
trainparity's core (DESIGN.md: its reader goes beside load_dcp).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["is_deepspeed_checkpoint", "load_deepspeed"]

MODEL_FILE = "mp_rank_00_model_states.pt"
# One per rank; a bf16 or fp16 run's optimizer files carry a prefix (bf16_zero_pp_rank_0_...).
_RANK_FILE = re.compile(
    r"^(?:[a-z0-9]+_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_(optim|model)_states\.pt$"
)
# The keys DeepSpeedEngine._common_checkpoint_state writes itself; every other key of the
# model states file is the client_state the script passed to save_checkpoint.
_ENGINE_KEYS = frozenset(
    {
        "module",
        "buffer_names",
        "optimizer",
        "param_shapes",
        "frozen_param_shapes",
        "shared_params",
        "frozen_param_fragments",
        "lr_scheduler",
        "data_sampler",
        "random_ltd",
        "sparse_tensor_module_names",
        "skipped_steps",
        "global_steps",
        "global_samples",
        "dp_world_size",
        "mp_world_size",
        "checkpoint_parallel_dimensions",
        "ds_config",
        "ds_version",
        "universal_checkpoint_info",
    }
)


def is_deepspeed_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a directory `engine.save_checkpoint` wrote (a `latest` file or a
    `<tag>/mp_rank_00_model_states.pt`), or one of its tag directories."""
    directory = Path(path)
    if not directory.is_dir():
        return False
    if (directory / "latest").is_file() or _model_file_in(directory) is not None:
        return True
    return any(_model_file_in(child) is not None for child in directory.iterdir() if child.is_dir())


def load_deepspeed(
    path: str | os.PathLike[str],
    *,
    tag: str | None = None,
    rank: int | None = None,
    weights_only: bool = True,
) -> dict[str, Any]:
    """The state saved in DeepSpeed ZeRO checkpoint directory `path`, as a dict of CPU tensors
    and plain values.

    `path` is the directory given to `engine.save_checkpoint` (the tag is read from its
    `latest` file unless `tag` names one) or a tag directory itself. The result holds
    `module` (the module state as saved), `fp32` (the fp32 master weights by parameter
    name, reassembled from every rank's partition), `optimizer` (`state` by parameter
    name, `param_groups` naming their parameters), `lr_scheduler`, `client_state`,
    `global_steps`, `skipped_steps`, `global_samples`, `zero` (stage, partition count,
    loss scaler) and `ds_config`. With `rank=R`, `fp32` and `optimizer.state` are rank
    R's own flat partition, one entry per parameter group, and `partition` says where
    it lies (`offset` and `numel` in each group's flat vector). A missing `latest` or
    tag directory, or a missing rank file, is a FileNotFoundError naming the file and
    the rank. `weights_only=False` lets other classes be unpickled (only for
    checkpoints you trust).
    """
    tag_directory = _tag_directory(Path(path), tag)
    with _deepspeed_classes_allowed():
        model_states = _model_states(tag_directory, weights_only)
        optimizer_files = _rank_files(tag_directory, "optim")
        optimizer_states = [
            _load(file, weights_only)["optimizer_state_dict"] for file in optimizer_files
        ]
    stage = int(optimizer_states[0]["zero_stage"])
    world_size = _world_size(optimizer_states[0]["partition_count"])
    _check_complete(tag_directory, optimizer_files, world_size, "optim")
    if stage == 3:
        _check_complete(tag_directory, _rank_files(tag_directory, "model"), world_size, "model")
    first = model_states[0]
    state: dict[str, Any] = {
        "module": dict(first["module"]),
        "lr_scheduler": first.get("lr_scheduler"),
        "client_state": {key: value for key, value in first.items() if key not in _ENGINE_KEYS},
        "global_steps": first.get("global_steps"),
        "skipped_steps": first.get("skipped_steps"),
        "global_samples": first.get("global_samples"),
        "zero": _zero_fields(optimizer_states[0], stage, world_size),
        "ds_config": first.get("ds_config"),
    }
    if rank is None:
        state.update(_reassembled(model_states, optimizer_states, stage, world_size))
    else:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank={rank} is not a rank of this {world_size}-rank checkpoint")
        state.update(_one_partition(optimizer_states, stage, rank))
    return state


def _model_file_in(directory: Path) -> Path | None:
    for name in (MODEL_FILE, "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if (directory / name).is_file():
            return directory / name
    return None


def _tag_directory(directory: Path, tag: str | None) -> Path:
    if tag is None and _model_file_in(directory) is not None:
        return directory  # a tag directory itself
    return tag_directory_named(
        directory,
        tag,
        latest_name="latest",
        what="DeepSpeed checkpoint",
        not_one="a DeepSpeed checkpoint directory with a latest tag",
        read_from="its latest file",
    )


def tag_directory_named(
    directory: Path, tag: str | None, *, latest_name: str, what: str, not_one: str, read_from: str
) -> Path:
    """`directory / tag`, the tag read from `directory / latest_name` when not given.

    Shared by the ZeRO reader and the universal one, which differ only in the
    file that names the tag and in how their messages call the directory.
    """
    named_by = "given"
    if tag is None:
        latest = directory / latest_name
        if not latest.is_file():
            raise FileNotFoundError(
                f"{str(latest)!r} is missing: {str(directory)!r} is not {not_one}; "
                "pass tag='global_stepN' or the tag directory"
            )
        tag, named_by = latest.read_text(encoding="utf-8").strip(), f"read from {read_from}"
    tag_directory = directory / tag
    if not tag_directory.is_dir():
        raise FileNotFoundError(
            f"{what} tag directory {str(tag_directory)!r} is missing (tag {tag!r}, {named_by})"
        )
    return tag_directory


def _rank_files(tag_directory: Path, kind: str) -> list[Path]:
    """The directory's per-rank files of `kind` ('optim' or 'model'), by rank."""
    found: dict[int, Path] = {}
    for child in tag_directory.iterdir():
        match = _RANK_FILE.match(child.name)
        if match is None or match.group(3) != kind:
            continue
        if match.group(2) != "00":
            raise ValueError(
                f"{str(child)!r} belongs to model-parallel rank {int(match.group(2))}: "
                "only checkpoints without tensor or pipeline parallelism (mp_rank_00) are read"
            )
        found[int(match.group(1))] = child
    if not found:
        raise FileNotFoundError(
            f"no zero_pp_rank_R_mp_rank_00_{kind}_states.pt file in {str(tag_directory)!r}: "
            "not a ZeRO checkpoint, or its rank 0 files were never written"
        )
    return [found[rank] for rank in sorted(found)]


def _check_complete(tag_directory: Path, files: list[Path], world_size: int, kind: str) -> None:
    ranks = {int(_RANK_FILE.match(file.name).group(1)) for file in files}  # type: ignore[union-attr]
    for rank in range(world_size):
        if rank not in ranks:
            raise FileNotFoundError(
                f"rank {rank}'s file zero_pp_rank_{rank}_mp_rank_00_{kind}_states.pt is missing "
                f"from {str(tag_directory)!r} (a {world_size}-rank ZeRO checkpoint): that rank "
                "did not finish saving, or the directory was copied in part"
            )
    if len(files) != world_size:
        raise ValueError(
            f"{str(tag_directory)!r} holds {len(files)} {kind} state files for a {world_size}-rank "
            "checkpoint: files of another save were left in it"
        )


def _model_states(tag_directory: Path, weights_only: bool) -> list[dict[str, Any]]:
    """The model states file (stage 1 and 2), or every rank's (stage 3), rank 0 first."""
    if (tag_directory / MODEL_FILE).is_file():
        return [_load(tag_directory / MODEL_FILE, weights_only)]
    files = _rank_files(tag_directory, "model")
    if not files[0].name.startswith("zero_pp_rank_0_"):
        raise FileNotFoundError(
            f"{MODEL_FILE} and rank 0's zero_pp_rank_0_mp_rank_00_model_states.pt are both "
            f"missing from {str(tag_directory)!r}"
        )
    return [_load(file, weights_only) for file in files]


def _load(file: Path, weights_only: bool) -> dict[str, Any]:
    import torch

    return torch.load(file, map_location="cpu", mmap=True, weights_only=weights_only)


@contextlib.contextmanager
def _deepspeed_classes_allowed() -> Iterator[None]:
    """weights_only loads that accept the classes DeepSpeed pickles into its checkpoints."""
    import torch
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    with torch.serialization.safe_globals(
        [DynamicLossScaler, LossScaler, ZeroStageEnum, fragment_address]
    ):
        yield


def _world_size(partition_count: Any) -> int:
    # ZeRO-2 stores one count per parameter group (expert groups may differ): the largest is dp.
    return int(max(partition_count) if isinstance(partition_count, list) else partition_count)


def _zero_fields(optimizer_state: dict[str, Any], stage: int, world_size: int) -> dict[str, Any]:
    scaler = optimizer_state.get("loss_scaler")
    plain = (bool, int, float, str)
    return {
        "stage": stage,
        "partition_count": world_size,
        "loss_scaler": {
            name: value for name, value in sorted(vars(scaler).items()) if isinstance(value, plain)
        }
        if scaler is not None
        else None,
        "dynamic_loss_scale": optimizer_state.get("dynamic_loss_scale"),
        "overflow": optimizer_state.get("overflow"),
        "clip_grad": optimizer_state.get("clip_grad"),
    }


def _flat_groups(optimizer_state: dict[str, Any], stage: int) -> list[Any]:
    """One rank's fp32 partition, one flat tensor per parameter group (padding removed)."""
    return list(
        optimizer_state["fp32_flat_groups" if stage == 3 else "single_partition_of_fp32_groups"]
    )


def _base_state(optimizer_state: dict[str, Any], stage: int) -> tuple[list[dict], list[dict]]:
    """The wrapped optimizer's (state per group, param_groups) over one rank's partition.

    Stage 1/2 save either the optimizer's own state_dict (state keyed by group index) or,
    with elastic checkpoints, a list of per-group states without padding.
    """
    if stage == 3:
        base = optimizer_state["optimizer_state_dict"]
    else:
        base = optimizer_state["base_optimizer_state"]
    if isinstance(base, list):
        return base, []
    groups = base["param_groups"]
    return [base["state"].get(group["params"][0], {}) for group in groups], groups


def _moment_flat_groups(
    group_states: list[dict], flat_groups: list[Any], key: str
) -> list[Any] | None:
    """One rank's `key` state as flat groups cut to the fp32 partition's length (the
    optimizer's copy keeps the alignment padding), or None where a group lacks it."""
    moments = []
    for group_state, flat in zip(group_states, flat_groups, strict=True):
        value = group_state.get(key)
        if not _is_flat(value):
            return None
        moments.append(value[: flat.numel()])
    return moments


def _is_flat(value: Any) -> bool:
    """A per-element state tensor over the flat partition (exp_avg), not a per-group value (step)."""
    import torch

    return isinstance(value, torch.Tensor) and value.dim() == 1


def _merge(
    flat_groups_per_rank: list[list[Any]],
    model_states: list[Any],
    stage: int,
    world_size: int,
    paddings: Any,
) -> dict[str, Any]:
    """Named tensors from per-rank flat groups, by DeepSpeed's own zero_to_fp32 merge."""
    from deepspeed.utils import zero_to_fp32

    named: dict[str, Any] = {}
    # Its merge functions report progress on stdout and stderr (print, tqdm): not ours to show.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if stage == 3:
            zero_to_fp32._zero3_merge_trainable_params(
                named, world_size, flat_groups_per_rank, model_states
            )
        else:
            zero_to_fp32._zero2_merge_trainable_params(
                named, world_size, flat_groups_per_rank, model_states, paddings
            )
    return zero_to_fp32.to_torch_tensor(named)


def _zero_model_states(model_states: list[dict[str, Any]]) -> list[Any]:
    """zero_to_fp32's per-rank description of the parameters, from the loaded model states."""
    from deepspeed.utils.zero_to_fp32 import zero_model_state

    described = []
    for state in model_states:
        buffer_names = set(state.get("buffer_names") or ())
        described.append(
            zero_model_state(
                buffers={
                    name: value.float() if value.is_floating_point() else value
                    for name, value in state["module"].items()
                    if name in buffer_names
                },
                param_shapes=state["param_shapes"],
                shared_params=[list(pair) for pair in (state.get("shared_params") or {}).items()],
                ds_version=state.get("ds_version"),
                frozen_param_shapes=state.get("frozen_param_shapes"),
                frozen_param_fragments=state.get("frozen_param_fragments"),
            )
        )
    return described


def _reassembled(
    model_states: list[dict[str, Any]],
    optimizer_states: list[dict[str, Any]],
    stage: int,
    world_size: int,
) -> dict[str, Any]:
    """fp32 master weights and optimizer state by parameter name, from every rank's partition."""
    from deepspeed.utils import zero_to_fp32

    described = _zero_model_states(model_states)
    flat_groups = [_flat_groups(state, stage) for state in optimizer_states]
    paddings = optimizer_states[0].get("param_alignment_paddings")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        if stage == 3:
            fp32 = zero_to_fp32._get_fp32_state_dict_from_zero3_checkpoint(
                world_size, flat_groups, described, False
            )
        else:
            fp32 = zero_to_fp32._get_fp32_state_dict_from_zero2_checkpoint(
                world_size, flat_groups, described, False, paddings
            )
        fp32 = zero_to_fp32.to_torch_tensor(fp32)

    per_rank = [_base_state(state, stage) for state in optimizer_states]
    group_states, param_groups = per_rank[0]
    names_by_group = [list(shapes) for shapes in model_states[0]["param_shapes"]]
    by_name: dict[str, dict[str, Any]] = {name: {} for names in names_by_group for name in names}
    for key in sorted({key for group_state in group_states for key in group_state}):
        moments = [
            _moment_flat_groups(rank_states, flat_groups[rank], key)
            for rank, (rank_states, _) in enumerate(per_rank)
        ]
        if all(moment is not None for moment in moments):
            for name, value in _merge(moments, described, stage, world_size, paddings).items():
                by_name[name][key] = value
        else:  # a value per group (AdamW's step): every parameter of the group has it
            for group_index, names in enumerate(names_by_group):
                for name in names:
                    if key in group_states[group_index]:
                        by_name[name][key] = group_states[group_index][key]
    groups = [
        {**{k: v for k, v in group.items() if k != "params"}, "params": names_by_group[index]}
        for index, group in enumerate(param_groups)
    ]
    return {"fp32": fp32, "optimizer": {"state": by_name, "param_groups": groups}}


def _one_partition(optimizer_states: list[dict[str, Any]], stage: int, rank: int) -> dict[str, Any]:
    """Rank `rank`'s flat fp32 partition and optimizer state, and where they lie."""
    flat_groups = [_flat_groups(state, stage) for state in optimizer_states]
    group_states, param_groups = _base_state(optimizer_states[rank], stage)
    own = flat_groups[rank]
    placement = [
        {
            "offset": sum(flat_groups[lower][index].numel() for lower in range(rank)),
            "numel": flat.numel(),
        }
        for index, flat in enumerate(own)
    ]
    state = {}
    for index, (group_state, flat) in enumerate(zip(group_states, own, strict=True)):
        state[index] = {
            key: value[: flat.numel()] if _is_flat(value) else value
            for key, value in group_state.items()
        }
    return {
        "fp32": dict(enumerate(own)),
        "optimizer": {"state": state, "param_groups": list(param_groups)},
        "partition": {"rank": rank, "world_size": len(flat_groups), "groups": placement},
    }
