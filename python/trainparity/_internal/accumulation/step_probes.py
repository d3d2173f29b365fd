"""What one boundary did besides its update: the gradient clipping it called, the random numbers it drew.

Both decide whether the declared relation can hold at all. A loop that clips
must be compared with a reference that clips the same way, and clipping also
hides a gradient's scale (a loss not divided by the microbatch count clips to
the same norm): the clipping call's own input norm keeps it visible. A step
that draws random numbers (dropout in training mode) draws masks shaped like
its batch, so the full batch and the microbatches compute different things.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["ClipRecorder", "RandomDraws", "gradient_observation", "random_modules"]

CLIP_FUNCTIONS = ("clip_grad_norm_", "clip_grad_value_")


class ClipRecorder:
    """Records every call of torch's gradient clipping functions while installed.

    Installed on `torch.nn.utils`, on `torch.nn.utils.clip_grad` and on every
    loaded module that imported the function by name (`from torch.nn.utils
    import clip_grad_norm_`), so a trainer's own call is seen however it was
    imported; everything is put back on exit.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._restore: list[tuple[dict[str, Any], str, Any]] = []

    def __enter__(self) -> ClipRecorder:
        from torch.nn.utils import clip_grad

        for name in CLIP_FUNCTIONS:
            original = getattr(clip_grad, name, None)
            if original is None:
                continue
            recording = self._recording(name, original)
            for namespace in _namespaces_holding(original):
                for key, value in list(namespace.items()):
                    if value is original:
                        self._restore.append((namespace, key, original))
                        namespace[key] = recording
        return self

    def __exit__(self, *exc_info: object) -> None:
        while self._restore:
            namespace, key, original = self._restore.pop()
            namespace[key] = original

    def _recording(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)
        def recording(*args: Any, **kwargs: Any) -> Any:
            result = original(*args, **kwargs)
            self.calls.append(_call_record(name, args, kwargs, result))
            return result

        return recording

    def record(self) -> dict[str, object] | None:
        """The calls so far as observed state (None when nothing clipped).

        `calls` counts them; the last call's function, limit and, for norm
        clipping, the gradient norm it found before clipping (`total_norm`)
        follow.
        """
        if not self.calls:
            return None
        return {"calls": len(self.calls), **self.calls[-1]}


def _namespaces_holding(original: Callable[..., Any]) -> list[dict[str, Any]]:
    """Module namespaces that hold `original` under some name (torch's own and importers')."""
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        if any(value is original for value in list(namespace.values())):
            found.append(namespace)
    return found


def _call_record(
    name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any
) -> dict[str, object]:
    if name == "clip_grad_value_":
        clip_value = kwargs.get("clip_value", args[1] if len(args) > 1 else None)
        return {"function": name, "clip_value": float(clip_value)}
    max_norm = kwargs.get("max_norm", args[1] if len(args) > 1 else None)
    norm_type = kwargs.get("norm_type", args[2] if len(args) > 2 else 2.0)
    record: dict[str, object] = {
        "function": name,
        "max_norm": float(max_norm),
        "norm_type": float(norm_type),
    }
    if isinstance(result, torch.Tensor):
        full = getattr(result, "full_tensor", None)  # FSDP2's norm is a replicated DTensor
        norm = full() if callable(full) else result
        record["total_norm"] = norm.detach().to(torch.float32).cpu().clone()
    return record


def random_modules(model: torch.nn.Module) -> list[str]:
    """The dropout-family modules of `model` that are in training mode with p > 0, by name."""
    from torch.nn.modules.dropout import _DropoutNd

    return [
        name or type(module).__name__
        for name, module in model.named_modules()
        if isinstance(module, _DropoutNd) and module.training and module.p > 0
    ]


class RandomDraws:
    """Whether torch's global generators moved between `start()` and `drew()`."""

    def __init__(self) -> None:
        self._states: list[torch.Tensor] = []

    def start(self) -> None:
        self._states = _generator_states()

    def drew(self) -> bool:
        now = _generator_states()
        return len(now) != len(self._states) or any(
            not torch.equal(before, after) for before, after in zip(self._states, now, strict=True)
        )


def _generator_states() -> list[torch.Tensor]:
    states = [torch.get_rng_state()]
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states.extend(torch.cuda.get_rng_state_all())
    return states


def gradient_observation(
    model: torch.nn.Module, clipping: ClipRecorder | None
) -> dict[str, object]:
    """The gradient phase: every parameter's `.grad` and, when the step clipped, `clipping`.

    `clipping` sorts before `gradient`, so a loop that clips another number
    of times, or a gradient of another scale, is named there first. None: not
    recorded (a check without the case's own train_step, whose plan declares
    the clipping of both sides: its phases stay as the contract gives them).
    """
    from trainparity._internal.state.snapshot_capture import gradient_tree

    observed: dict[str, object] = {"gradient": gradient_tree(model)}
    record = clipping.record() if clipping is not None else None
    if record is not None:
        observed["clipping"] = record
    return observed
