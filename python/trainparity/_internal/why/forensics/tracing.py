"""`trainparity.trace(...)`: capture one training step, as a context manager or around a function."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.why.forensics.capture import CAPTURES, StepRecorder, debug_mode_available
from trainparity._internal.why.forensics.records import Trace
from trainparity._internal.why.forensics.trace_file import write_trace

__all__ = ["TraceSession", "trace"]


def trace(
    path: str | os.PathLike[str] | None = None,
    *,
    model: torch.nn.Module | None = None,
    inputs: Mapping[str, torch.Tensor] | None = None,
    keep: Iterable[str] = (),
    step: int | None = None,
    capture: str = "auto",
    run: Callable[[], Any] | None = None,
) -> Any:
    """Trace one training step: every op (forward, backward, optimizer) and every value it touched.

    As a context manager, `with trainparity.trace("step.trace", model=model) as session:`
    traces the block; the file is written when it ends and `session.trace` is
    the in-memory Trace. With `run=step_fn` it calls `step_fn()` under the
    trace and returns the Trace.

    `path`: the trace file (snapshot layout; None keeps it in memory only).
    `model`: names module paths and parameters (default: the first module
    run at top level is taken as the root). `inputs`: names for batch tensors
    and other inputs (`{"edge_index": edge_index}`), so a divergence inherited
    from one is reported by name. `keep`: module paths whose op outputs are
    also kept whole ("" keeps everything), for an element-wise comparison;
    otherwise only digests and summaries are stored. `step`: recorded in the
    file. `capture`: "auto" (DebugMode where torch has it, else a
    TorchDispatchMode), "DebugMode" or "TorchDispatchMode".
    """
    session = TraceSession(path, model=model, inputs=inputs, keep=keep, step=step, capture=capture)
    if run is None:
        return session
    if not callable(run):
        raise TypeError(f"run must be callable, not {type(run).__name__}")
    with session:
        run()
    return session.trace


class TraceSession:
    """The context manager `trace()` returns; `.trace` holds the Trace once the block has ended."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None,
        *,
        model: torch.nn.Module | None,
        inputs: Mapping[str, torch.Tensor] | None,
        keep: Iterable[str],
        step: int | None,
        capture: str,
    ) -> None:
        if capture not in CAPTURES:
            raise ValueError(f"capture must be one of {CAPTURES}, got {capture!r}")
        if capture == "DebugMode" and not debug_mode_available():
            raise ValueError(
                f"capture='DebugMode' needs torch >= 2.10 (this is {torch.__version__}); "
                "use 'auto' or 'TorchDispatchMode'"
            )
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
        if isinstance(keep, str):
            raise TypeError("keep must be an iterable of module paths, e.g. ('encoder.fc1',)")
        if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
            raise TypeError(f"step must be an int or None, not {type(step).__name__}")
        self.path = Path(path) if path is not None else None
        self.capture = (
            ("DebugMode" if debug_mode_available() else "TorchDispatchMode")
            if capture == "auto"
            else capture
        )
        self.step = step
        self.recorder = StepRecorder(model=model, inputs=inputs, keep=keep)
        self.trace: Trace | None = None
        self._contexts: list[Any] = []

    def __enter__(self) -> TraceSession:
        if self._contexts:
            raise RuntimeError("a trace session can be entered once")
        recorder = self.recorder
        if self.capture == "DebugMode":
            from torch.utils._debug_mode import DebugMode

            # Hooks: before the op (inputs measured before an in-place op writes them)
            # and after it; both return None, so DebugMode stores nothing of theirs.
            contexts: list[Any] = [
                DebugMode(record_output=False, record_profiler_context=False),
                DebugMode.dispatch_hooks(
                    record_hook=lambda func, types, args, kwargs, result: recorder.after(
                        func, args, kwargs, result
                    ),
                    pre_log_hook=lambda func, types, args, kwargs, call: recorder.before(
                        func, args, kwargs
                    ),
                ),
            ]
        else:
            contexts = [_TraceDispatchMode(recorder)]
        recorder.paths.install()
        try:
            for context in contexts:
                context.__enter__()
                self._contexts.append(context)
        except BaseException:
            self._leave(None, None, None)
            raise
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self._leave(kind, error, traceback)
        trace = self.recorder.trace
        trace.step = self.step
        trace.capture = self.capture
        trace.environment = environment_fingerprint()
        self.trace = trace
        if kind is None and self.path is not None:
            write_trace(self.path, trace)
            trace.path = str(self.path)

    def discard(self) -> None:
        """Stop capturing without building or writing a trace: the step it covered did not end."""
        self._leave(None, None, None)

    def _leave(self, kind: Any, error: Any, traceback: Any) -> None:
        self.recorder.paths.remove()
        while self._contexts:
            self._contexts.pop().__exit__(kind, error, traceback)


class _TraceDispatchMode(TorchDispatchMode):
    """The interception below torch 2.10 (no DebugMode): the same two callbacks around each op."""

    def __init__(self, recorder: StepRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        if any(kind is not torch.Tensor for kind in types):  # tensor subclasses: not traced
            return func(*args, **kwargs)
        self.recorder.before(func, args, kwargs)
        result = func(*args, **kwargs)
        self.recorder.after(func, args, kwargs, result)
        return result
