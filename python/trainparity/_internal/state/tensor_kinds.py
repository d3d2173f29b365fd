"""Which tensors can be read as plain memory: the one gate every tensor passes before the C core.

The C core reads a tensor's bytes through its data pointer. A wrapper
subclass (DTensor, FakeTensor, a nested or float8 tensor, a functorch
wrapper) has no storage of its own there, so reading it would crash the
process. Every tensor is therefore sorted here, in Python, into:

- plain: `torch.Tensor`, `nn.Parameter`, or a subclass that only overrides
  `__torch_function__` (its storage is ordinary memory), dense and strided;
- sharded: a DTensor or a ShardedTensor with one local shard on this rank:
  the local shard (itself plain) and its ShardPlacement, never gathered;
- anything else: UnsupportedStateError naming the path and the type.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

import torch

from trainparity._internal.state.paths import StatePath
from trainparity._internal.state.placement import IndexRuns, ShardPlacement

__all__ = ["readable_tensor"]

_DTENSOR_MODULES = ("torch.distributed.tensor", "torch.distributed._tensor")
_SHARDED_TENSOR_MODULE = "torch.distributed._shard.sharded_tensor"


def readable_tensor(
    tensor: torch.Tensor, path: StatePath, unsupported: type[Exception]
) -> tuple[torch.Tensor, ShardPlacement | None]:
    """(a plain dense strided tensor to read, its shard placement or None) for `tensor`.

    `unsupported` is the error class raised with (path, detail): the state
    layer's UnsupportedStateError (passed in, as it is defined beside freeze).
    """
    dtensor_class = _loaded_class(_DTENSOR_MODULES, "DTensor")
    if dtensor_class is not None and isinstance(tensor, dtensor_class):
        # The local shard itself: to_local() would go through DTensor's dispatch (and
        # autograd) for the same tensor, which costs more than reading it.
        local = getattr(tensor, "_local_tensor", None)
        if local is None:
            local = tensor.detach().to_local()
        return _plain(local, path, unsupported, "DTensor local shard"), _dtensor_placement(tensor)
    sharded_class = _loaded_class((_SHARDED_TENSOR_MODULE,), "ShardedTensor")
    if sharded_class is not None and isinstance(tensor, sharded_class):
        return _sharded_tensor_shard(tensor, path, unsupported)
    return _plain(tensor, path, unsupported, None), None


def _loaded_class(modules: Sequence[str], name: str) -> type | None:
    """The class if a module that defines it is already imported (a tensor of it can exist only then)."""
    for module_name in modules:
        module = sys.modules.get(module_name)
        found = getattr(module, name, None) if module is not None else None
        if isinstance(found, type):
            return found
    return None


def _type_name(tensor: object) -> str:
    kind = type(tensor)
    return f"{kind.__module__}.{kind.__qualname__}"


def _plain(
    tensor: torch.Tensor, path: StatePath, unsupported: type[Exception], role: str | None
) -> torch.Tensor:
    """`tensor` as a plain torch.Tensor over readable memory, or `unsupported` saying why not."""
    what = (
        f"{role} of type {_type_name(tensor)}" if role else f"tensor of type {_type_name(tensor)}"
    )
    kind = type(tensor)
    if kind is not torch.Tensor and kind is not torch.nn.Parameter:
        # Only __torch_function__ subclasses share a plain tensor's storage; a subclass
        # that dispatches itself (a wrapper) has none the C core could read.
        if getattr(kind, "__torch_dispatch__", None) is not torch.Tensor.__torch_dispatch__:
            raise unsupported(
                path,
                f"{what}: a tensor subclass with its own __torch_dispatch__ has no plain "
                "memory to read; record a plain tensor made from it instead",
            )
        if isinstance(tensor, torch.nn.parameter.UninitializedTensorMixin):
            raise unsupported(path, f"{what}: uninitialized (lazy module not yet run)")
        with torch._C.DisableTorchFunctionSubclass():
            tensor = tensor.as_subclass(torch.Tensor)
    if getattr(tensor, "is_nested", False):
        raise unsupported(path, f"nested {what}")
    if tensor.layout != torch.strided:
        raise unsupported(path, f"{what} with layout {tensor.layout} (only dense strided tensors)")
    if tensor.is_quantized:
        raise unsupported(path, f"quantized {what}; record .dequantize() instead")
    if tensor.device.type == "meta":
        raise unsupported(path, f"meta {what} (has no values)")
    if _functorch_wrapped(tensor):
        raise unsupported(
            path, f"{what} inside vmap/grad/functionalize (a functorch wrapper, no plain memory)"
        )
    return tensor


def _functorch_wrapped(tensor: torch.Tensor) -> bool:
    functorch = getattr(torch._C, "_functorch", None)
    if functorch is not None and functorch.is_functorch_wrapped_tensor(tensor):
        return True
    is_functional = getattr(torch, "_is_functional_tensor", None)
    return bool(is_functional is not None and is_functional(tensor))


def _dtensor_placement(tensor: torch.Tensor) -> ShardPlacement:
    mesh = tensor.device_mesh
    placements = tuple(tensor.placements)
    global_shape = tuple(int(size) for size in tensor.shape)
    offsets = _dtensor_offsets(global_shape, mesh, placements)
    coordinate = mesh.get_coordinate()
    index_runs: IndexRuns = ()
    if coordinate is not None and any(_is_strided(placement) for placement in placements):
        index_runs = _strided_index_runs(
            global_shape,
            tuple(int(size) for size in mesh.shape),
            tuple(int(c) for c in coordinate),
            placements,
        )
    return ShardPlacement(
        kind="dtensor",
        mesh_shape=tuple(int(size) for size in mesh.shape),
        placements=_rendered(placements),
        # A rank outside the mesh holds an empty local tensor and no coordinate.
        coordinate=tuple(int(c) for c in coordinate) if coordinate is not None else (),
        global_shape=global_shape,
        offsets=offsets,
        index_runs=index_runs,
    )


# A torch placement's repr costs a fraction of a millisecond, as do its offsets: a state's
# DTensors share a few placements, and record() sees the same ones at every step.
@functools.lru_cache(maxsize=1024)
def _rendered(placements: tuple) -> tuple[str, ...]:
    return tuple(repr(placement) for placement in placements)


def _is_strided(placement: object) -> bool:
    return type(placement).__name__ == "_StridedShard"


# Every record() of a state asks again for the same few parameters' shapes and placements.
@functools.lru_cache(maxsize=1024)
def _strided_index_runs(
    global_shape: tuple[int, ...],
    mesh_shape: tuple[int, ...],
    coordinate: tuple[int, ...],
    placements: tuple,
) -> IndexRuns:
    """The global rows of each strided-sharded dimension of this rank's shard, as runs.

    A `_StridedShard` interleaves, so its shard is no block at one offset.
    The rows come from torch's own rule: the placements split an index
    vector in mesh order (as `compute_local_shape_and_global_offset` does,
    which keeps only the first), each with its own `_split_tensor`.
    """
    rows: dict[int, torch.Tensor] = {}
    for mesh_dim, placement in enumerate(placements):
        dim = getattr(placement, "dim", None)
        if dim is None or not hasattr(placement, "_split_tensor"):
            continue  # Replicate, Partial: every rank of this mesh dimension has all rows
        current = rows.get(dim, torch.arange(global_shape[dim]))
        # The index vector laid along `dim`, as the placement splits a tensor there.
        shaped = current.view([1] * dim + [current.numel()])
        pieces, _ = placement._split_tensor(
            shaped, int(mesh_shape[mesh_dim]), with_padding=False, contiguous=False
        )
        rows[dim] = pieces[coordinate[mesh_dim]].reshape(-1)
    strided_dims = sorted({placement.dim for placement in placements if _is_strided(placement)})
    return tuple((dim, _runs(rows[dim])) for dim in strided_dims)


def _runs(indices: torch.Tensor) -> tuple[tuple[int, int], ...]:
    """`indices` (1-D) as (start, length) runs of consecutive values, in order."""
    count = indices.numel()
    if count == 0:
        return ()
    breaks = torch.nonzero(indices[1:] - indices[:-1] != 1).reshape(-1) + 1
    starts = torch.cat([torch.zeros(1, dtype=breaks.dtype), breaks])
    ends = torch.cat([breaks, torch.full((1,), count, dtype=breaks.dtype)])
    return tuple(zip(indices[starts].tolist(), (ends - starts).tolist(), strict=True))


@functools.lru_cache(maxsize=1024)
def _dtensor_offsets(global_shape: tuple[int, ...], mesh: object, placements: tuple) -> tuple:
    """The local shard's global offsets, from torch's own rule (uneven shards included)."""
    for module_name in ("torch.distributed.tensor._utils", "torch.distributed._tensor._utils"):
        try:
            module = __import__(module_name, fromlist=["compute_local_shape_and_global_offset"])
        except ImportError:
            continue
        compute = getattr(module, "compute_local_shape_and_global_offset", None)
        if compute is not None:
            _, offsets = compute(global_shape, mesh, placements)
            return tuple(int(offset) for offset in offsets)
    raise RuntimeError(
        "this torch has no compute_local_shape_and_global_offset: DTensor shard offsets unknown"
    )


def _sharded_tensor_shard(
    tensor: torch.Tensor, path: StatePath, unsupported: type[Exception]
) -> tuple[torch.Tensor, ShardPlacement]:
    shards = tensor.local_shards()
    if len(shards) != 1:
        raise unsupported(
            path,
            f"ShardedTensor with {len(shards)} local shards on this rank (one is supported); "
            "record its local shards one by one instead",
        )
    (shard,) = shards
    everyone = tensor.metadata().shards_metadata
    local = _plain(shard.tensor, path, unsupported, "ShardedTensor local shard")
    offsets = tuple(int(offset) for offset in shard.metadata.shard_offsets)
    spec = tensor.sharding_spec()
    return local, ShardPlacement(
        kind="sharded_tensor",
        mesh_shape=(len(everyone),),
        placements=(type(spec).__name__ + _spec_dim(spec),),
        coordinate=(
            next(
                index
                for index, meta in enumerate(everyone)
                if tuple(meta.shard_offsets) == tuple(shard.metadata.shard_offsets)
            ),
        ),
        global_shape=tuple(int(size) for size in tensor.size()),
        offsets=offsets,
    )


def _spec_dim(spec: object) -> str:
    dim = getattr(spec, "dim", None)
    return f"(dim={dim})" if dim is not None else "()"
