"""What a trace holds: the ops of one training step and every tensor value they read or wrote."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["VALUE_KINDS", "Trace", "TraceOp", "TraceValue"]

# How a value came to be:
#   output         written by a traced op (its digest and summary were taken right after it)
#   leaf           read by an op but written by none: a parameter, buffer, batch tensor or constant
#   mutated        a tensor changed through another tensor (a view) since an op last wrote it;
#                  digested when it was next read
#   view           an alias made by a view op (t, view, expand, ...): no bytes of its own, so no
#                  digest; it equals its source's counterpart whenever the source does
#   uninitialized  the output of an allocation op (empty, empty_like, ...): its bytes are
#                  whatever the allocator left, so it is never compared
VALUE_KINDS = ("output", "leaf", "mutated", "view", "uninitialized")


@dataclass(frozen=True)
class TraceValue:
    """One tensor value as an op saw it: identity in the trace, metadata, digest and summary.

    `sum`, `l2_norm` and `max_abs` are float64 over the finite elements (NaN
    when not summarised: views, uninitialized values, complex and float8
    dtypes); `digest` is the 16-byte digest of the element bytes (C order),
    or None where the kind has no bytes of its own.
    """

    index: int
    kind: str
    dtype: str
    device: str
    shape: tuple[int, ...]
    producer: int = -1  # the op that wrote it (output, view, uninitialized), else -1
    source: int = -1  # a view's source value, else -1
    name: str = ""  # leaves: parameter/buffer/input name where known
    digest: bytes | None = None
    count: int = 0
    sum: float = math.nan
    l2_norm: float = math.nan
    max_abs: float = math.nan
    nan_count: int = 0
    inf_count: int = 0


@dataclass(frozen=True)
class TraceOp:
    """One dispatched op: name (`aten::mm`), module path, phase, per-key call index, values."""

    index: int
    name: str
    module: str  # "" when outside every module (e.g. the optimizer step)
    phase: str  # "forward", "backward" or "other"
    call_index: int  # how many earlier ops had the same (module, phase, name)
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    @property
    def key(self) -> tuple[str, str, str, int]:
        """What aligns it with its counterpart in another trace."""
        return (self.module, self.phase, self.name, self.call_index)

    def label(self) -> str:
        where = self.module or "(top level)"
        return f"{self.name} in {where} ({self.phase}, call {self.call_index})"


@dataclass
class Trace:
    """One traced training step: ops in dispatch order, values, kept tensors, environment."""

    ops: list[TraceOp] = field(default_factory=list)
    values: list[TraceValue] = field(default_factory=list)
    kept: dict[int, Any] = field(default_factory=dict)  # value index -> tensor (kept modules)
    environment: dict[str, Any] | None = None
    step: int | None = None
    capture: str = ""  # "DebugMode" or "TorchDispatchMode"
    path: str | None = None

    def describe_value(self, index: int) -> str:
        """A value for a person: its name or the op that made it, shape and dtype."""
        value = self.values[index]
        shape = "x".join(str(size) for size in value.shape) or "scalar"
        if value.kind in ("leaf", "mutated"):
            first_use = next((op for op in self.ops if index in op.inputs), None)
            used = f", first read by {first_use.label()}" if first_use is not None else ""
            name = value.name or "unnamed input"
            prefix = "" if value.kind == "leaf" else "changed in place through a view: "
            return f"{prefix}{name} ({shape} {value.dtype}{used})"
        producer = self.ops[value.producer] if value.producer >= 0 else None
        made = f"output of {producer.label()}" if producer is not None else value.kind
        return f"{made} ({shape} {value.dtype})"
