"""Freezing of observed training state into immutable trees with tensor leaves as raw bytes."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Union

from trainparity._internal.native.core import tensor_bytes
from trainparity._internal.native.cuda import DeviceTensorBytes
from trainparity._internal.native.dtypes import info_for_dtype, info_for_text
from trainparity._internal.state.file_ranges import FileRange
from trainparity._internal.state.paths import StatePath, render_path
from trainparity._internal.state.placement import PlacedShard, ShardPlacement

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch

__all__ = [
    "AmbiguousStateNameError",
    "FrozenMapping",
    "FrozenSequence",
    "FrozenTensor",
    "FrozenValue",
    "FullValueBackend",
    "MappingKey",
    "UnsupportedStateError",
    "freeze",
    "mapping_key_order",
    "nested_named_values",
    "render_path",
]

SCALAR_TYPES = (type(None), bool, int, float, str, bytes)

MappingKey = Union[None, bool, int, float, str, bytes]  # noqa: UP007 - runtime alias, Python 3.10
"""A frozen mapping's key: a str, or another plain scalar (a MultiStepLR's milestone counts)."""

# str keys come first, so a str-keyed mapping keeps code-point order; the other kinds
# follow, each kind by value: `1`, `True` and `1.0` are distinct keys of distinct kinds.
_KEY_KINDS: dict[type, int] = {str: 0, type(None): 1, bool: 2, int: 3, float: 4, bytes: 5}


def mapping_key_order(key: MappingKey) -> tuple[int, MappingKey]:
    """The sort key of a frozen mapping key: its kind, then its value (a total order).

    Equal Python values of different kinds (`1`, `True`, `1.0`) get distinct
    sort keys, so they never pair up when two mappings are compared.
    """
    return (_KEY_KINDS[type(key)], key)


class UnsupportedStateError(TypeError):
    """A value that trainparity cannot freeze; `path` says where it was found."""

    def __init__(self, path: StatePath, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"unsupported state at {render_path(path)}: {detail}")


class AmbiguousStateNameError(ValueError):
    """Dotted names that cannot be expanded into one tree (`layer` and `layer.weight`)."""


@dataclass(frozen=True, eq=False)
class FrozenTensor:
    """A tensor's metadata and its raw C-contiguous, native-byte-order element bytes.

    `data` is a read-only buffer owned by the frozen value (a private copy, or
    a slice of a memory-mapped snapshot file); it never aliases live state
    unless created with `freeze(..., copy=False)` for a transient comparison.
    There a CUDA tensor's bytes stay on the GPU: `data` is then a
    `cuda_backend.DeviceTensorBytes` (sliceable to `bytes`, compared and
    digested on the device). `digest` is the 16-byte content digest when known
    (snapshot files carry it). `placement` is set for a rank's local shard
    of a sharded tensor (DTensor, ShardedTensor): `shape` and `data` are then
    the local shard's, and the placement says where it sits in the global
    tensor. `source` is set when `data` is memory mapped from a file (see
    `freeze(locate=...)`): a snapshot may then refer to that file range
    instead of copying the bytes.
    """

    shape: tuple[int, ...]
    dtype: str
    device: str
    requires_grad: bool
    data: Any = field(repr=False)
    digest: bytes | None = field(default=None, repr=False)
    placement: ShardPlacement | None = None
    source: FileRange | None = field(default=None, repr=False)

    @classmethod
    def capture(cls, tensor: torch.Tensor) -> FrozenTensor:
        """A private copy of `tensor` (any device, any strides)."""
        return _freeze_tensor(tensor, (), copy=True)

    @property
    def nbytes(self) -> int:
        return self.numel * info_for_text(self.dtype).element_size

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def to_tensor(self) -> torch.Tensor:
        """A new CPU tensor holding a copy of the frozen values."""
        import torch

        entry = info_for_text(self.dtype)
        if self.nbytes == 0:
            return torch.empty(self.shape, dtype=entry.dtype)
        if isinstance(self.data, DeviceTensorBytes):
            return self.data.tensor.to("cpu").reshape(self.shape)
        raw = torch.frombuffer(bytearray(self.data), dtype=torch.uint8)
        return raw.view(entry.dtype).reshape(self.shape)

    def leading_values(self, count: int = 4) -> list[Any]:
        """The first `count` flattened values as Python numbers (for summaries)."""
        import torch

        entry = info_for_text(self.dtype)
        take = min(count, self.numel) * entry.element_size
        if take == 0:
            return []
        raw = torch.frombuffer(bytearray(self.data[:take]), dtype=torch.uint8)
        return raw.view(entry.dtype).tolist()

    def value_at(self, index: int) -> Any:
        """The flattened element at `index` as a Python number."""
        import torch

        entry = info_for_text(self.dtype)
        start = index * entry.element_size
        chunk = bytearray(self.data[start : start + entry.element_size])
        return torch.frombuffer(chunk, dtype=torch.uint8).view(entry.dtype).tolist()[0]


@dataclass(frozen=True)
class FrozenMapping:
    """A mapping with entries sorted by key: str keys in code-point order, then other
    plain scalar keys by kind and value (`mapping_key_order`)."""

    entries: tuple[tuple[MappingKey, FrozenValue], ...]

    def keys(self) -> list[MappingKey]:
        return [key for key, _ in self.entries]

    def as_dict(self) -> dict[MappingKey, FrozenValue]:
        return dict(self.entries)


@dataclass(frozen=True)
class FrozenSequence:
    """A list or tuple: `kind` remembers which, `items` keep their order."""

    kind: str
    items: tuple[FrozenValue, ...]


FrozenValue = Union[  # noqa: UP007 - a runtime alias that must also work on Python 3.10
    None, bool, int, float, str, bytes, FrozenTensor, FrozenMapping, FrozenSequence
]


def freeze(
    value: object,
    path: StatePath = (),
    *,
    copy: bool = True,
    locate: Callable[[torch.Tensor], FileRange | None] | None = None,
) -> FrozenValue:
    """Freeze `value` into an immutable tree (docs/compatibility.md, "Snapshots").

    Raises UnsupportedStateError naming the path for values that cannot be
    frozen (tensor subclasses other than DTensor/ShardedTensor and
    __torch_function__-only ones, non-strided, meta or quantized tensors,
    mapping keys that are not plain scalars or are NaN, arbitrary objects,
    cyclic containers). Scalar keys of a subclass (an IntEnum member) are
    kept as their built-in kind, as a snapshot file would give them back. A DTensor
    freezes to this rank's local shard and its placement, never gathered; so
    does a PlacedShard (a plain local tensor with the placement its owner
    knows). With copy=False tensor leaves are zero-copy views of contiguous
    CPU tensors, and CUDA tensors stay on their GPU: only for a comparison that finishes before the live state changes.
    `locate` (copy=False only) names the file range a tensor's memory is
    mapped from, kept as the leaf's `source`.
    """
    return _Freezer(copy, locate).freeze(value, path)


class _Freezer:
    def __init__(
        self, copy: bool, locate: Callable[[torch.Tensor], FileRange | None] | None = None
    ) -> None:
        self.copy = copy
        self.locate = None if copy else locate
        self.open_containers: set[int] = set()

    def freeze(self, value: object, path: StatePath) -> FrozenValue:
        if isinstance(value, SCALAR_TYPES):
            return value  # type: ignore[return-value]
        if _is_tensor(value):
            return _freeze_tensor(value, path, copy=self.copy, locate=self.locate)
        if isinstance(value, PlacedShard):
            return _freeze_tensor(
                value.local, path, copy=self.copy, locate=self.locate, placement=value.placement
            )
        if isinstance(value, Mapping):
            return self._container(value, path, self._mapping)
        if isinstance(value, (list, tuple)):
            return self._container(value, path, self._sequence)
        raise UnsupportedStateError(path, _qualified_type_name(value))

    def _container(self, value, path, build):
        marker = id(value)
        if marker in self.open_containers:
            raise UnsupportedStateError(path, "cyclic reference to an enclosing container")
        self.open_containers.add(marker)
        try:
            return build(value, path)
        finally:
            self.open_containers.discard(marker)

    def _mapping(self, value: Mapping, path: StatePath) -> FrozenMapping:
        keyed = [(_frozen_key(key, path), key) for key in value]
        keyed.sort(key=lambda pair: mapping_key_order(pair[0]))
        return FrozenMapping(
            tuple((key, self.freeze(value[live], (*path, key))) for key, live in keyed)
        )

    def _sequence(self, value: list | tuple, path: StatePath) -> FrozenSequence:
        kind = "tuple" if isinstance(value, tuple) else "list"
        items = tuple(self.freeze(item, (*path, index)) for index, item in enumerate(value))
        return FrozenSequence(kind, items)


def _frozen_key(key: object, path: StatePath) -> MappingKey:
    """`key` as its built-in scalar kind; UnsupportedStateError for any other key."""
    if isinstance(key, str):
        return key  # str subclasses stay as they are, as str values do
    for kind in (bool, int, float, bytes):  # bool before int: True is an int too
        if isinstance(key, kind):
            frozen = kind(key)
            if kind is float and math.isnan(frozen):
                raise UnsupportedStateError(path, "mapping key nan has no order")
            return frozen
    if key is None:
        return None
    raise UnsupportedStateError(
        path, f"mapping key {key!r} ({_qualified_type_name(key)}) is not a plain scalar"
    )


def _is_tensor(value: object) -> bool:
    """Whether `value` is a torch.Tensor; without torch imported, nothing can be one."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _qualified_type_name(value: object) -> str:
    kind = type(value)
    return f"{kind.__module__}.{kind.__qualname__}"


def _freeze_tensor(
    tensor: torch.Tensor,
    path: StatePath,
    *,
    copy: bool,
    locate: Callable[[torch.Tensor], FileRange | None] | None = None,
    placement: ShardPlacement | None = None,
) -> FrozenTensor:
    """`tensor` frozen; `placement`, when given, is the one a PlacedShard declares for it."""
    from trainparity._internal.state.tensor_kinds import readable_tensor

    # Every tensor passes this gate before its bytes can reach the C core (tensor_kinds.py).
    local, own_placement = readable_tensor(tensor, path, UnsupportedStateError)
    if placement is None:
        placement = own_placement
    elif own_placement is not None:
        raise UnsupportedStateError(
            path, "a PlacedShard's local tensor is itself sharded: give its local shard instead"
        )
    elif len(local.shape) != len(placement.global_shape) or any(
        offset + size > whole
        for offset, size, whole in zip(
            placement.offsets, local.shape, placement.global_shape, strict=False
        )
    ):
        raise UnsupportedStateError(
            path,
            f"a PlacedShard of shape {list(local.shape)} at offsets {list(placement.offsets)} "
            f"does not fit in its global shape {list(placement.global_shape)}",
        )
    if info_for_dtype(local.dtype) is None:
        raise UnsupportedStateError(path, f"tensor dtype {local.dtype}")
    detached = local.detach()
    source = None
    if copy:
        data = _private_copy(detached)
    elif detached.device.type == "cuda":
        data = DeviceTensorBytes(
            detached
        )  # compared and digested on the device, never copied whole
    else:
        data = tensor_bytes(contiguous_cpu(detached))
        source = locate(detached) if locate is not None else None
    return FrozenTensor(
        shape=tuple(int(size) for size in local.shape),
        dtype=str(local.dtype),
        device=str(local.device),
        requires_grad=bool(tensor.requires_grad),
        data=data,
        placement=placement,
        source=source,
    )


def contiguous_cpu(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` itself when already contiguous on the CPU, else a contiguous CPU copy."""
    if tensor.device.type != "cpu":
        tensor = tensor.to("cpu")
    if tensor.is_conj():
        tensor = tensor.resolve_conj()
    if tensor.is_neg():
        tensor = tensor.resolve_neg()
    return tensor.contiguous()


def _private_copy(tensor: torch.Tensor) -> memoryview:
    """One copy of the tensor's values into a buffer we own (any device, any strides)."""
    import torch

    nbytes = tensor.numel() * tensor.element_size()
    if nbytes == 0:
        return memoryview(b"")
    storage = bytearray(nbytes)
    target = torch.frombuffer(storage, dtype=torch.uint8).view(tensor.dtype).view(tensor.shape)
    target.copy_(tensor.resolve_conj().resolve_neg())
    return memoryview(storage).toreadonly()


class FullValueBackend:
    """The reference freezer: every tensor value is copied into the snapshot."""

    name = "full_value_reference"

    def freeze(self, value: object, path: StatePath = ()) -> FrozenValue:
        return freeze(value, path)


def nested_named_values(mapping: Mapping[str, object] | Iterable[tuple[str, object]]) -> dict:
    """Expand dotted names (`layer.weight`) into nested dicts (docs/compatibility.md, "Snapshots").

    Names are processed in sorted order; a name that is both a leaf and a
    prefix of another name raises AmbiguousStateNameError.
    """
    items = mapping.items() if isinstance(mapping, Mapping) else mapping
    root: dict[str, object] = {}
    leaves: set[tuple[str, ...]] = set()
    for name, value in sorted(items, key=lambda item: item[0]):
        parts = tuple(name.split("."))
        node = root
        for depth, part in enumerate(parts[:-1]):
            if parts[: depth + 1] in leaves:
                leaf = ".".join(parts[: depth + 1])
                raise AmbiguousStateNameError(f"name {name!r} extends the leaf {leaf!r}")
            node = node.setdefault(part, {})  # type: ignore[assignment]
        if parts[-1] in node:
            raise AmbiguousStateNameError(f"name {name!r} is both a leaf and a prefix")
        node[parts[-1]] = value
        leaves.add(parts)
    return root
