"""Capturing one training step: every dispatched op, its module path, and a digest and summary of each value.

Ops are intercepted below autograd, so forward, backward and optimizer ops
are all seen, in the order they ran. With torch >= 2.10 the interception is
torch's own DebugMode (its dispatch hooks give each op's arguments before it
runs, so the inputs of an in-place op are measured before it writes them, and
its result after); below that, a plain TorchDispatchMode with the same two
callbacks. Module paths come from module hooks: forward pre/post hooks keep a
stack of the modules being run, and gradient hooks on each module's outputs
and inputs mark where its backward starts and ends.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

from trainparity._internal.native.core import tensor_bytes
from trainparity._internal.native.cuda import DeviceTensorBytes, digest_buffer
from trainparity._internal.state.summaries import TensorSummary, summarize_tensor
from trainparity._internal.why.forensics.records import Trace, TraceOp, TraceValue

__all__ = ["CAPTURES", "StepRecorder", "debug_mode_available", "measure_tensor"]

CAPTURES = ("auto", "DebugMode", "TorchDispatchMode")
# Allocation ops: their output bytes are whatever the allocator left there.
_UNINITIALIZED_PREFIXES = ("aten::empty", "aten::new_empty")
# Profiler markers (record_function regions) are not computations.
_SKIPPED_PREFIX = "profiler::"


def debug_mode_available() -> bool:
    """Whether this torch has DebugMode (torch >= 2.10) with the dispatch hooks a trace uses."""
    try:
        from torch.utils._debug_mode import DebugMode
    except ImportError:
        return False
    return hasattr(DebugMode, "dispatch_hooks")


def measure_tensor(tensor: torch.Tensor) -> TensorSummary:
    """Digest and float64 summary of a tensor's elements (C order), where the tensor lives.

    CPU tensors go through the C core (recording.summaries, one digest pass
    and one summary pass). CUDA tensors are digested on the GPU and
    summarised there by torch reductions in float64: nothing is copied to the
    host but the seven numbers.
    """
    flat = tensor.detach().resolve_conj().resolve_neg()
    dtype = str(flat.dtype).removeprefix("torch.")
    if flat.device.type == "cpu":
        return summarize_tensor(str(flat.dtype), tensor_bytes(flat.contiguous()))
    data = DeviceTensorBytes(flat)
    digest, _ = digest_buffer(data)
    count = flat.numel()
    if flat.is_complex() or not (flat.is_floating_point() or dtype in _DEVICE_INTEGER_DTYPES):
        return TensorSummary(digest, count, math.nan, math.nan, math.nan, 0, 0)
    values = data.tensor.to(torch.float64)
    finite = torch.isfinite(values)
    nan_count = torch.isnan(values).sum()
    inf_count = count - finite.sum() - nan_count
    kept = torch.where(finite, values, torch.zeros((), dtype=torch.float64, device=values.device))
    numbers = torch.stack(
        [
            kept.sum(),
            kept.square().sum().sqrt(),
            kept.abs().amax() if count else kept.new_zeros(()),
            nan_count.to(torch.float64),
            inf_count.to(torch.float64),
        ]
    ).tolist()
    total, l2_norm, max_abs, nans, infs = numbers
    return TensorSummary(digest, count, total, l2_norm, max_abs, int(nans), int(infs))


_DEVICE_INTEGER_DTYPES = frozenset(
    {"bool", "uint8", "int8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}
)


def _is_measurable(tensor: torch.Tensor) -> bool:
    return tensor.layout == torch.strided and tensor.device.type in ("cpu", "cuda")


class _ModulePaths:
    """The module path an op runs in, forward and backward, from module and gradient hooks."""

    def __init__(self, model: torch.nn.Module | None) -> None:
        self.names = WeakIdKeyDictionary()
        self.forward_stack: list[str] = []
        # Modules whose backward has started and not ended: (token, path).
        self.backward_entries: list[tuple[int, str]] = []
        self.tokens = itertools.count()
        self.active = False
        self.roots: list[torch.nn.Module] = []
        self.handles: list[Any] = []
        if model is not None:
            self.add_root(model)

    def add_root(self, model: torch.nn.Module) -> None:
        self.roots.append(model)
        for name, module in model.named_modules():
            self.names.setdefault(module, name)

    def name_of(self, module: torch.nn.Module) -> str:
        name = self.names.get(module)
        if name is None:
            if not self.forward_stack:  # a module run at top level: the root of the paths
                self.add_root(module)
                return ""
            name = type(module).__name__
        return name

    def install(self) -> None:
        self.active = True
        modules = torch.nn.modules.module
        self.handles = [
            modules.register_module_forward_pre_hook(self._forward_pre_hook),
            modules.register_module_forward_hook(self._forward_hook, always_call=True),
        ]

    def remove(self) -> None:
        self.active = False
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def _forward_pre_hook(self, module: torch.nn.Module, args: Any) -> None:
        if self.active:
            self.forward_stack.append(self.name_of(module))

    def _forward_hook(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if not self.active or not self.forward_stack:
            return
        path = self.forward_stack.pop()
        if not torch.is_grad_enabled():
            return
        outputs = [item for item in tree_leaves(output) if _needs_grad(item)]
        inputs = [item for item in tree_leaves(args) if _needs_grad(item)]
        if not outputs:
            return
        token = next(self.tokens)
        register = torch.autograd.graph.register_multi_grad_hook
        # The gradient of the module's first output to be ready marks the start of
        # its backward; the first gradient of one of its inputs marks the end.
        register(
            outputs, lambda _grad, token=token, path=path: self._enter(token, path), mode="any"
        )
        if inputs:
            register(inputs, lambda _grad, token=token: self._exit(token), mode="any")

    def _enter(self, token: int, path: str) -> None:
        if not self.active:
            return
        # A module whose inputs need no gradient never ends its backward by a hook; it
        # has ended when another module starts that is neither inside it nor around it.
        self.backward_entries = [
            entry for entry in self.backward_entries if _nested(entry[1], path)
        ]
        self.backward_entries.append((token, path))

    def _exit(self, token: int) -> None:
        self.backward_entries = [entry for entry in self.backward_entries if entry[0] != token]

    def current(self) -> tuple[str, str]:
        """(module path, phase) of an op dispatched now."""
        if _in_backward():
            # Hooks of a module and of the modules around it can fire in either order
            # for one shared output tensor: the innermost module is the deepest path.
            paths = [path for _, path in self.backward_entries]
            return (max(paths, key=_depth) if paths else ""), "backward"
        self.backward_entries.clear()  # a backward pass has ended
        if self.forward_stack:
            return self.forward_stack[-1], "forward"
        return "", "other"

    def parameter_names(self) -> WeakIdKeyDictionary:
        names = WeakIdKeyDictionary()
        for root in self.roots:
            for name, tensor in itertools.chain(
                root.named_parameters(remove_duplicate=False),
                root.named_buffers(remove_duplicate=False),
            ):
                names.setdefault(tensor, name)
        return names


def _depth(path: str) -> int:
    return path.count(".") + 1 if path else 0


def _nested(outer: str, inner: str) -> bool:
    """Whether one module path is inside the other (or they are the same)."""

    def inside(path: str, around: str) -> bool:
        return around == "" or path == around or path.startswith(around + ".")

    return inside(inner, outer) or inside(outer, inner)


def _needs_grad(item: Any) -> bool:
    return isinstance(item, torch.Tensor) and item.requires_grad


_current_node = getattr(torch._C, "_current_autograd_node", None)


def _in_backward() -> bool:
    return _current_node is not None and _current_node() is not None


class StepRecorder:
    """Builds a Trace from the two callbacks of the dispatch interception: before and after each op."""

    def __init__(
        self,
        *,
        model: torch.nn.Module | None,
        inputs: Mapping[str, torch.Tensor] | None,
        keep: Iterable[str],
    ) -> None:
        self.trace = Trace()
        self.paths = _ModulePaths(model)
        self.input_names = WeakIdKeyDictionary()
        for name, tensor in (inputs or {}).items():
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"inputs[{name!r}] must be a tensor, not {type(tensor).__name__}")
            self.input_names[tensor] = name
        self.keep = tuple(keep)
        # tensor -> (value index, its storage's write generation when the value was taken).
        # Every write an op makes (out-of-place outputs, in-place and out= arguments)
        # starts a new generation of the storage written, so a tensor that shares the
        # storage (a view, or the base of a view that was written) no longer matches
        # and is measured again when next read. Tensor version counters cannot serve:
        # autograd bumps them after the dispatch callbacks have run.
        self.known = WeakIdKeyDictionary()
        self.generations: dict[int, int] = {}
        self.call_counts: dict[tuple[str, str, str], int] = {}
        self.lock = threading.RLock()
        self.pending = threading.local()
        self._parameter_names: WeakIdKeyDictionary | None = None

    # Callbacks -------------------------------------------------------------------------

    def before(self, func: Any, args: tuple, kwargs: dict) -> None:
        name = func.name()
        if name.startswith(_SKIPPED_PREFIX):
            self.pending.inputs = None
            return
        with self.lock:
            tensors = [
                item for item in tree_leaves((args, kwargs)) if isinstance(item, torch.Tensor)
            ]
            self.pending.inputs = tuple(self._resolve(tensor) for tensor in tensors)

    def after(self, func: Any, args: tuple, kwargs: dict, result: Any) -> None:
        inputs = getattr(self.pending, "inputs", None)
        self.pending.inputs = None
        if inputs is None:
            return
        with self.lock:
            self._record(func, args, kwargs, result, inputs)

    # Values ------------------------------------------------------------------------------

    def _resolve(self, tensor: torch.Tensor) -> int:
        """The value a tensor holds now: the one an op recorded, else a new leaf (measured now)."""
        entry = self.known.get(tensor)
        storage = _storage_key(tensor)
        generation = self.generations.get(storage, 0)
        if entry is not None and (entry[1] == generation or storage == 0):
            return entry[0]
        seen = entry is not None or generation > 0
        index = self._add_value(
            tensor, "mutated" if seen else "leaf", name="" if seen else self._leaf_name(tensor)
        )
        self.known[tensor] = (index, generation)
        return index

    def _leaf_name(self, tensor: torch.Tensor) -> str:
        name = self.input_names.get(tensor)
        if name is not None:
            return name
        if self._parameter_names is None:
            self._parameter_names = self.paths.parameter_names()
        return self._parameter_names.get(tensor, "")

    def _add_value(
        self,
        tensor: torch.Tensor,
        kind: str,
        *,
        producer: int = -1,
        source: int = -1,
        name: str = "",
    ) -> int:
        index = len(self.trace.values)
        fields: dict[str, Any] = {}
        if kind in ("output", "leaf", "mutated") and _is_measurable(tensor):
            summary = measure_tensor(tensor)
            fields = {
                "digest": summary.digest,
                "count": summary.count,
                "sum": summary.sum,
                "l2_norm": summary.l2_norm,
                "max_abs": summary.max_abs,
                "nan_count": summary.nan_count,
                "inf_count": summary.inf_count,
            }
        else:
            fields = {"count": tensor.numel()}
        self.trace.values.append(
            TraceValue(
                index=index,
                kind=kind,
                dtype=str(tensor.dtype).removeprefix("torch."),
                device=str(tensor.device),
                shape=tuple(int(size) for size in tensor.shape),
                producer=producer,
                source=source,
                name=name,
                **fields,
            )
        )
        return index

    # Ops ---------------------------------------------------------------------------------

    def _record(self, func: Any, args: tuple, kwargs: dict, result: Any, inputs: tuple) -> None:
        name = func.name()
        module, phase = self.paths.current()
        key = (module, phase, name)
        call_index = self.call_counts.get(key, 0)
        self.call_counts[key] = call_index + 1
        op_index = len(self.trace.ops)
        outputs = _output_tensors(func, args, kwargs, result)
        if name.startswith(_UNINITIALIZED_PREFIXES):
            kind = "uninitialized"
        elif getattr(func, "is_view", False) and not func._schema.is_mutable:
            kind = "view"
        else:
            kind = "output"
        source = inputs[0] if kind == "view" and inputs else -1
        keep = self._keeps(module)
        indices = []
        for tensor in outputs:
            storage = _storage_key(tensor)
            if kind != "view":
                self.generations[storage] = self.generations.get(storage, 0) + 1
            index = self._add_value(tensor, kind, producer=op_index, source=source)
            self.known[tensor] = (index, self.generations.get(storage, 0))
            if keep and kind == "output" and _is_measurable(tensor):
                self.trace.kept[index] = tensor.detach().clone()
            indices.append(index)
        self.trace.ops.append(
            TraceOp(
                index=op_index,
                name=name,
                module=module,
                phase=phase,
                call_index=call_index,
                inputs=inputs,
                outputs=tuple(indices),
            )
        )

    def _keeps(self, module: str) -> bool:
        return any(
            prefix == "" or module == prefix or module.startswith(prefix + ".")
            for prefix in self.keep
        )


def _storage_key(tensor: torch.Tensor) -> int:
    """The address of a tensor's storage; 0 for empty storages and tensors without one."""
    try:
        return tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def _output_tensors(func: Any, args: tuple, kwargs: dict, result: Any) -> list[torch.Tensor]:
    """The tensors an op produced: its results, then the arguments it wrote (in-place, out=)."""
    outputs: list[torch.Tensor] = []
    seen: set[int] = set()
    for item in tree_leaves(result):
        if isinstance(item, torch.Tensor) and id(item) not in seen:
            seen.add(id(item))
            outputs.append(item)
    for position, argument in enumerate(func._schema.arguments):
        alias = argument.alias_info
        if alias is None or not alias.is_write:
            continue
        if argument.kwarg_only or position >= len(args):
            written = kwargs.get(argument.name)
        else:
            written = args[position]
        for item in tree_leaves(written):
            if isinstance(item, torch.Tensor) and id(item) not in seen:
                seen.add(id(item))
                outputs.append(item)
    return outputs
