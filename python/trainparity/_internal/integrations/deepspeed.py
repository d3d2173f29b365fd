"""DeepSpeed under trainparity: a ZeRO engine's live state for record(), each rank's own partition.

In the training script::

    from trainparity._internal.integrations import deepspeed as tp_ds

    engine.load_checkpoint(...)                  # when resuming
    trainparity.record(step, tp_ds.engine_state(engine))
    for batch in loader:
        ...                                      # engine(batch), engine.backward(loss), engine.step()
        step += 1
        trainparity.record(step, tp_ds.engine_state(engine))

`engine_state(engine)` gives, with the paths `load_deepspeed` gives a
checkpoint:

- `module[name]`: the parameters the module computes with (frozen ones
  too) and its persistent buffers; under ZeRO-1/2 the whole tensor (every
  rank holds it), under ZeRO-3 a parameter's partition on this rank;
- `fp32[name]`: this rank's fragment of the fp32 master weights;
- `optimizer.state[name].<key>`: this rank's fragment of each optimizer
  state of the parameter's shape (`exp_avg`, `exp_avg_sq`), and `step`;
- `optimizer.param_groups[i]`: every hyperparameter but `params`;
- `lr_scheduler`: the engine's scheduler's `state_dict()` (None without one);
- `global_steps`, `global_samples`, `skipped_steps`: the engine's counters.

A fragment is a view of DeepSpeed's own flat partition (no copy, no
gather), recorded with its placement: kind "zero_fragment", a 1-D shard of
the flattened parameter (global shape `(numel,)`, offset its first element).
A rank that holds none of a parameter records an empty fragment, so every
rank's state has the same paths. Two runs of one layout compare fragment by
fragment, rank by rank; runs of different world sizes compare each
parameter's flat tensor reassembled from all ranks' fragments.

ZeRO stages 1, 2 and 3, with the optimizer's state in memory (on the
accelerator or offloaded to the CPU); NVMe-swapped optimizer state is not
read. No collective is issued: call it on every rank, or on one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from trainparity._internal.integrations._common import require
from trainparity._internal.state.placement import PlacedShard, ShardPlacement

__all__ = ["engine_state"]

deepspeed = require("deepspeed", "deepspeed")
torch = require("deepspeed", "torch")


@dataclass(frozen=True)
class _Fragment:
    """Where a rank's part of one parameter lives: in the flattened parameter and in a flat partition."""

    name: str
    numel: int
    start: int  # first element held, in the flattened parameter
    length: int
    flat: Any  # the fp32 flat partition (a key of the base optimizer's state)
    flat_start: int  # where the held elements start in `flat`


def engine_state(engine: Any) -> dict[str, Any]:
    """This rank's state of a DeepSpeed ZeRO `engine`, for `trainparity.record(step, ...)`."""
    stage = int(engine.zero_optimization_stage())
    if stage not in (1, 2, 3):
        raise ValueError(
            f"engine_state reads ZeRO stages 1, 2 and 3; this engine runs stage {stage}: "
            "record engine.module.state_dict() and the optimizer's state_dict() instead"
        )
    zero = engine.optimizer
    base = zero.optimizer  # the client's torch optimizer, stepping on the flat fp32 partitions
    fragments = list(_zero3_fragments(engine) if stage == 3 else _zero12_fragments(engine))
    moment_keys = _moment_keys(base)
    # The data-parallel group the ZeRO optimizer partitions over (no collective: local queries).
    world = int(deepspeed.comm.get_world_size(group=zero.dp_process_group))
    rank = int(deepspeed.comm.get_rank(group=zero.dp_process_group))
    fp32: dict[str, Any] = {}
    optimizer_state: dict[str, Any] = {}
    for fragment in fragments:
        placement = _placement(stage, world, rank, fragment.numel, fragment.start)
        fp32[fragment.name] = PlacedShard(_held(fragment, fragment.flat), placement)
        flat_state = base.state.get(fragment.flat, {})
        entry: dict[str, Any] = {
            key: PlacedShard(_held(fragment, flat_state[key]), placement)
            if key in flat_state
            else None
            for key in moment_keys
        }
        if "step" in flat_state:
            entry["step"] = flat_state["step"]
        optimizer_state[fragment.name] = entry
    return {
        "module": _module_state(engine, stage, world, rank),
        "fp32": fp32,
        "optimizer": {
            "state": optimizer_state,
            "param_groups": [
                {key: value for key, value in group.items() if key != "params"}
                for group in base.param_groups
            ],
        },
        "lr_scheduler": (
            engine.lr_scheduler.state_dict() if engine.lr_scheduler is not None else None
        ),
        "global_steps": int(engine.global_steps),
        "global_samples": int(engine.global_samples),
        "skipped_steps": int(engine.skipped_steps),
    }


def _zero12_fragments(engine: Any) -> Iterator[_Fragment]:
    """ZeRO-1/2: each parameter's fragment in this rank's flat fp32 partition of its group.

    DeepSpeed links every parameter this rank holds part of to that part
    (`param._hp_mapping`, a `tensor_fragment`: the fragment's start in the
    flattened parameter and in the flat partition); a parameter this rank
    holds none of has no mapping.
    """
    zero = engine.optimizer
    names = _parameter_names(engine)
    for group_index, parameters in enumerate(zero.bit16_groups):
        flat = zero.single_partition_of_fp32_groups[group_index]
        for parameter in parameters:
            mapping = getattr(parameter, "_hp_mapping", None)
            start = length = flat_start = 0
            if mapping is not None:
                start = int(mapping.lp_fragment_address.start)
                length = int(mapping.lp_fragment_address.numel)
                flat_start = int(mapping.hp_fragment_address.start)
            yield _Fragment(
                names[id(parameter)], parameter.numel(), start, length, flat, flat_start
            )


def _zero3_fragments(engine: Any) -> Iterator[_Fragment]:
    """ZeRO-3: each parameter's partition, rank r holding elements [r*size, (r+1)*size).

    The last partition is padded to `size`; only the parameter's own elements
    are recorded. The fp32 partition sits in a flat sub-group at the offset
    DeepSpeed keeps in `grad_position` (what its own
    `safe_get_local_fp32_param` narrows with).
    """
    zero = engine.optimizer
    for name, parameter in engine.module.named_parameters():
        if not parameter.requires_grad:
            continue
        start, length = _zero3_span(zero, parameter)
        group_index, flat_start, _ = zero.grad_position[zero.get_param_id(parameter)]
        yield _Fragment(
            name,
            int(parameter.ds_numel),
            start,
            length,
            zero.fp32_partitioned_groups_flat[group_index],
            int(flat_start),
        )


def _zero3_span(zero: Any, parameter: Any) -> tuple[int, int]:
    """(first element, length) of the part of a ZeRO-3 parameter this rank holds, padding left out."""
    rank = int(zero._get_param_partition_rank(parameter))
    size = int(parameter.ds_tensor.ds_numel)
    numel = int(parameter.ds_numel)
    start = min(rank * size, numel)
    return start, min(size, numel - start)


def _module_state(engine: Any, stage: int, world: int, rank: int) -> dict[str, Any]:
    """The module's parameters (ZeRO-3: this rank's partition of each) and persistent buffers.

    Frozen parameters too: they have no fp32 master copy or optimizer state,
    but they are the module's state. Buffers are never partitioned.
    """
    state: dict[str, Any] = {}
    for name, parameter in engine.module.named_parameters():
        if stage == 3:
            start, length = _zero3_span(engine.optimizer, parameter)
            state[name] = PlacedShard(
                parameter.ds_tensor.detach().narrow(0, 0, length),
                _placement(stage, world, rank, int(parameter.ds_numel), start),
            )
        else:
            state[name] = parameter.detach()
    for prefix, submodule in engine.module.named_modules():
        for name, buffer in submodule.named_buffers(recurse=False):
            if buffer is not None and name not in submodule._non_persistent_buffers_set:
                state[f"{prefix}.{name}" if prefix else name] = buffer.detach()
    return state


def _parameter_names(engine: Any) -> dict[int, str]:
    return {id(parameter): name for name, parameter in engine.module.named_parameters()}


def _moment_keys(base: Any) -> list[str]:
    """The optimizer's per-element state keys (`exp_avg`, ...): tensors of their flat partition's shape."""
    keys: set[str] = set()
    for flat, state in base.state.items():
        keys.update(
            key
            for key, value in state.items()
            if torch.is_tensor(value) and value.shape == flat.shape
        )
    return sorted(keys)


def _held(fragment: _Fragment, flat: Any) -> Any:
    """The fragment's elements of a flat partition-shaped tensor: a view, never a copy."""
    return flat.detach().narrow(0, fragment.flat_start, fragment.length)


def _placement(stage: int, world: int, rank: int, numel: int, start: int) -> ShardPlacement:
    return ShardPlacement(
        kind="zero_fragment",
        mesh_shape=(world,),
        placements=(f"ZeroFragment(stage={stage})",),
        coordinate=(rank,),
        global_shape=(numel,),
        offsets=(start,),
    )
