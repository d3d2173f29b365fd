"""Live capture of a model, optimizer, scheduler, scaler and RNG into a snapshot (docs/compatibility.md, "Snapshots")."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.freeze import (
    AmbiguousStateNameError,
    FrozenMapping,
    FullValueBackend,
    UnsupportedStateError,
    nested_named_values,
)
from trainparity._internal.state.paths import StatePath, render_path
from trainparity._internal.state.snapshot import Snapshot

__all__ = [
    "CaptureIssue",
    "CaptureResult",
    "OptimizerMappingError",
    "canonical_optimizer_state",
    "capture_snapshot",
    "capture_tree",
    "gradient_tree",
    "parameter_and_buffer_trees",
    "rng_tree",
    "state_dict_or_none",
]


class _Missing:
    """Marks an argument that was not passed: its section is left out of the snapshot."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING: Any = _Missing()


@dataclass(frozen=True)
class CaptureIssue:
    """Why a capture did not produce a snapshot: the rendered path and what was wrong there."""

    path: str
    detail: str


@dataclass(frozen=True)
class CaptureResult:
    """PASS with a snapshot; ABSTAIN (unsupported or ambiguous state) or ERROR with an issue."""

    outcome: Outcome
    snapshot: Snapshot | None = None
    issue: CaptureIssue | None = None


class OptimizerMappingError(ValueError):
    """The optimizer's parameters cannot be named uniquely through the model (docs/compatibility.md, "Snapshots")."""

    def __init__(self, path: StatePath, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{detail} at {render_path(path)}")


def capture_snapshot(
    model: torch.nn.Module,
    *,
    step: int | None = None,
    optimizer: Any = MISSING,
    scheduler: Any = MISSING,
    scaler: Any = MISSING,
    extras: Mapping[str, object] | None = None,
    batch: Any = MISSING,
    capture_rng: bool = True,
    backend: Any = None,
) -> CaptureResult:
    """Freeze the live training objects into a snapshot.

    Sections: `model`, `buffer`, `gradient` always; `optimizer` (canonical,
    name-keyed), `scheduler`, `scaler` and `batch` only when the argument is
    passed (`None` stores None); `extra` when `extras` is not None (values with
    a `state_dict()` are replaced by it); `rng` when `capture_rng`. Never
    raises for the captured values: unsupported or ambiguous state gives
    ABSTAIN, any other failure ERROR, each with the issue's path.
    """

    def build() -> dict[str, object]:
        tree: dict[str, object] = parameter_and_buffer_trees(model)
        tree["gradient"] = gradient_tree(model)
        if optimizer is not MISSING:
            tree["optimizer"] = (
                None if optimizer is None else canonical_optimizer_state(optimizer, model)
            )
        if scheduler is not MISSING:
            tree["scheduler"] = state_dict_or_none(scheduler)
        if scaler is not MISSING:
            tree["scaler"] = state_dict_or_none(scaler)
        if extras is not None:
            tree["extra"] = {key: _extra_value(value) for key, value in extras.items()}
        if batch is not MISSING:
            tree["batch"] = batch
        if capture_rng:
            tree["rng"] = rng_tree()
        return tree

    return capture_tree(build, step=step, backend=backend)


def capture_tree(
    build: Callable[[], Mapping[str, object]], *, step: int | None, backend: Any = None
) -> CaptureResult:
    """Run `build` and freeze what it returns, classifying every failure as ABSTAIN or ERROR."""
    freezer = backend if backend is not None else FullValueBackend()
    try:
        frozen = freezer.freeze(build())
        if not isinstance(frozen, FrozenMapping):
            raise TypeError(
                f"backend {freezer.name!r} returned a {type(frozen).__name__}, not a frozen mapping"
            )
    except UnsupportedStateError as error:
        return _issue(Outcome.ABSTAIN, render_path(error.path), str(error))
    except OptimizerMappingError as error:
        return _issue(Outcome.ABSTAIN, render_path(error.path), str(error))
    except AmbiguousStateNameError as error:
        return _issue(Outcome.ABSTAIN, "$", str(error))
    except Exception as error:  # user state_dict() code, custom backends: anything can fail
        return _issue(Outcome.ERROR, "$", error_text(error))
    return CaptureResult(Outcome.PASS, Snapshot(step=step, state=frozen, backend=freezer.name))


def _issue(outcome: Outcome, path: str, detail: str) -> CaptureResult:
    return CaptureResult(outcome, issue=CaptureIssue(path, detail))


def parameter_and_buffer_trees(model: torch.nn.Module) -> dict[str, object]:
    """`{"model": nested parameters, "buffer": nested buffers}`, every name kept (tied ones too)."""
    return {
        "model": nested_named_values(model.named_parameters(remove_duplicate=False)),
        "buffer": nested_named_values(model.named_buffers(remove_duplicate=False)),
    }


def gradient_tree(model: torch.nn.Module) -> dict[str, object]:
    """Each parameter's `.grad` (None where absent), nested like the parameters."""
    return nested_named_values(
        (name, parameter.grad) for name, parameter in model.named_parameters(remove_duplicate=False)
    )


def state_dict_or_none(owner: Any) -> dict[str, object] | None:
    """`None` for None, else a plain dict of `owner.state_dict()`."""
    return None if owner is None else dict(owner.state_dict())


def _extra_value(value: object) -> object:
    state_dict = getattr(value, "state_dict", None)
    return dict(state_dict()) if callable(state_dict) else value


def rng_tree() -> dict[str, object]:
    """The global generators: Python, torch CPU, numpy's legacy state, every CUDA device."""
    tree: dict[str, object] = {
        "python": random.getstate(),
        "torch_cpu": torch.get_rng_state(),
    }
    try:
        import numpy
    except ImportError:
        numpy = None
    if numpy is not None:
        algorithm, keys, position, has_gauss, cached_gaussian = numpy.random.get_state(legacy=True)
        tree["numpy"] = {
            "algorithm": str(algorithm),
            "keys": {
                "dtype": str(keys.dtype),
                "shape": list(keys.shape),
                "values": keys.tolist(),
            },
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        }
    if torch.cuda.is_available():
        tree["torch_cuda"] = {
            f"device_{index}": state for index, state in enumerate(torch.cuda.get_rng_state_all())
        }
    return tree


def canonical_optimizer_state(optimizer: Any, model: torch.nn.Module) -> dict[str, object]:
    """The optimizer's groups and state keyed by parameter name instead of identity (§4.5).

    Raises OptimizerMappingError when a group entry is not a Parameter of the
    model, has several names (tied weights), occurs twice, or when a state key
    cannot be mapped to exactly one name. Memory ids never appear in the result.
    """
    names_by_identity: dict[int, list[str]] = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        names_by_identity.setdefault(id(parameter), []).append(name)
    name_in_groups: dict[int, str] = {}
    groups: list[dict[str, object]] = []
    for group_index, group in enumerate(optimizer.param_groups):
        params_path: StatePath = ("optimizer", "param_groups", group_index, "params")
        params = group["params"]
        if not isinstance(params, list):
            raise OptimizerMappingError(params_path, "parameter group does not contain a list")
        names: list[str] = []
        for entry_index, parameter in enumerate(params):
            entry_path = (*params_path, entry_index)
            if not isinstance(parameter, torch.nn.Parameter):
                raise OptimizerMappingError(entry_path, "optimizer entry is not a Parameter")
            owners = names_by_identity.get(id(parameter), [])
            if not owners:
                raise OptimizerMappingError(entry_path, "parameter has no model name")
            if len(owners) > 1:
                raise OptimizerMappingError(entry_path, f"parameter has aliases {tuple(owners)!r}")
            if id(parameter) in name_in_groups:
                raise OptimizerMappingError(entry_path, "parameter occurs more than once")
            name_in_groups[id(parameter)] = owners[0]
            names.append(owners[0])
        canonical = {key: value for key, value in group.items() if key != "params"}
        canonical["params"] = names
        groups.append(canonical)
    state_path: StatePath = ("optimizer", "state")
    state_by_name: dict[str, object] = {}
    for parameter, parameter_state in optimizer.state.items():
        if not isinstance(parameter, torch.nn.Parameter):
            raise OptimizerMappingError(state_path, "optimizer state key is not a Parameter")
        if id(parameter) not in name_in_groups:
            raise OptimizerMappingError(state_path, "optimizer state key is not uniquely mapped")
        state_by_name[name_in_groups[id(parameter)]] = dict(parameter_state)
    for name in name_in_groups.values():
        state_by_name.setdefault(name, {})
    try:
        state = nested_named_values(state_by_name)
    except AmbiguousStateNameError as error:
        raise OptimizerMappingError(state_path, str(error)) from None
    return {"param_groups": groups, "state": state}
