"""The accumulation execution plan, the phases it observes, and how a batch is split into microbatches."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = [
    "INITIAL_KEY",
    "PHASES",
    "RANKS_KEY",
    "RANK_FIELDS",
    "AccumulationExecutionPlan",
    "UnsafeBatchSplit",
    "split_for_case",
    "split_tensor_tree",
]

PHASES = ("loss_accounting", "gradient", "optimizer_state", "parameter_update", "scheduler_state")
"""The observed phases of one optimizer-update boundary, in comparison order."""

INITIAL_KEY = "initial"
"""The subtree of a worker's observation file that holds the state before any phase."""

RANKS_KEY = "ranks"
"""Observation key of what only a rank has: `gradient_syncs`, the DDP reductions of the update."""

# This module is torch-free until a batch is split: the check's own process validates plans
# and never trains, so a warm check need not import torch at all (docs/limitations.md).


# The execution plan ---------------------------------------------------------------------


@dataclass(frozen=True)
class AccumulationExecutionPlan:
    """How the candidate executes one optimizer-update boundary (docs/compatibility.md, "check_accumulation").

    The defaults describe correct accumulation; each flag turns on one
    well-known mistake so that a check can show where it is first observed.
    """

    microbatch_count: int
    scale_accumulated_loss: bool = True
    use_explicit_loss_accounting: bool = True
    optimizer_step_per_microbatch: bool = False
    scheduler_step_per_microbatch: bool = False
    zero_grad_before_gradient_observation: bool = False
    clip_grad_norm: float | None = None
    clip_per_microbatch: bool = False
    amp_step_before_unscale: bool = False
    omit_final_microbatch: bool = False
    # Several ranks (our addition, docs/compatibility.md, "check_accumulation"; see accumulation_ranks): the candidate runs as
    # `world_size` processes under DDP, each on its contiguous share of the microbatches.
    world_size: int = 1
    no_sync_backward_only: bool = False
    sync_first_microbatch: bool = False
    clip_before_sync: bool = False
    per_rank_loss_normalization: bool = False

    def validate(self) -> None:
        """Raise ValueError for values no execution can honour, TypeError for wrong field types.

        ValueError: microbatch_count < 1, clip_grad_norm <= 0 or NaN, clip_per_microbatch
        without clip_grad_norm.
        """
        count = self.microbatch_count
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"microbatch_count must be an int, got {type(count).__name__}")
        if count < 1:
            raise ValueError("microbatch_count must be positive")
        for flag in _FLAG_NAMES:
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {type(value).__name__}")
        norm = self.clip_grad_norm
        if norm is not None:
            if isinstance(norm, bool) or not isinstance(norm, (int, float)):
                raise TypeError(
                    f"clip_grad_norm must be a number or None, got {type(norm).__name__}"
                )
            if math.isnan(norm) or norm <= 0:
                raise ValueError("clip_grad_norm must be positive")
        elif self.clip_per_microbatch:
            # Without a norm the flag would silently do nothing.
            raise ValueError("clip_per_microbatch needs clip_grad_norm")
        validate_ranks(self)

    def to_dict(self) -> dict[str, Any]:
        """The contract's ten fields (docs/compatibility.md, "check_accumulation") by name, plus each multi-rank field not at its default.

        A single-rank plan therefore has exactly the contract's ten keys.
        """
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in RANK_FIELDS or getattr(self, field.name) != field.default
        }

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> AccumulationExecutionPlan:
        """Rebuild and validate a plan from the ten field names (multi-rank fields optional)."""
        if not isinstance(mapping, Mapping):
            raise TypeError(f"plan must be a mapping, got {type(mapping).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        expected = known - set(RANK_FIELDS)
        missing = sorted(expected - set(mapping))
        unexpected = sorted(set(mapping) - known, key=str)
        if missing or unexpected:
            raise ValueError(
                f"plan must have exactly the fields {sorted(expected)}; "
                f"missing {missing}, unexpected {unexpected}"
            )
        plan = cls(**mapping)
        plan.validate()
        return plan


RANK_FIELDS = (
    "world_size",
    "no_sync_backward_only",
    "sync_first_microbatch",
    "clip_before_sync",
    "per_rank_loss_normalization",
)
"""Plan fields beyond the contract's ten (docs/compatibility.md, "check_accumulation"); `to_dict` lists them only when they are not at the default."""

RANK_FAULTS = RANK_FIELDS[1:]
SINGLE_RANK_FAULTS = (
    "optimizer_step_per_microbatch",
    "scheduler_step_per_microbatch",
    "zero_grad_before_gradient_observation",
    "clip_per_microbatch",
    "amp_step_before_unscale",
    "omit_final_microbatch",
)


def validate_ranks(plan: Any) -> None:
    """TypeError/ValueError for a multi-rank setting no execution can honour."""
    size = plan.world_size
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"world_size must be an int, got {type(size).__name__}")
    if size < 1:
        raise ValueError("world_size must be positive")
    if size == 1:
        wanted = [flag for flag in RANK_FAULTS if getattr(plan, flag)]
        if wanted:
            raise ValueError(f"{', '.join(wanted)} needs world_size > 1")
        return
    if plan.microbatch_count % size:
        raise ValueError(
            f"microbatch_count ({plan.microbatch_count}) must be a multiple of world_size ({size}): "
            "every rank takes an equal contiguous share"
        )
    single = [flag for flag in SINGLE_RANK_FAULTS if getattr(plan, flag)]
    if single:
        raise ValueError(f"{', '.join(single)} describes the single-rank loop; use world_size=1")
    if plan.clip_before_sync and plan.clip_grad_norm is None:
        raise ValueError("clip_before_sync needs clip_grad_norm")


_FLAG_NAMES = tuple(
    field.name
    for field in dataclasses.fields(AccumulationExecutionPlan)
    if field.name not in ("microbatch_count", "clip_grad_norm", "world_size")
)


# Batch splitting ------------------------------------------------------------------------


class UnsafeBatchSplit(ValueError):
    """The batch cannot be split into microbatches without guessing (the check ABSTAINs)."""


def split_tensor_tree(batch: object, parts: int) -> list[object]:
    """Split a tree of tensors along dim 0 into `parts` contiguous, ordered microbatches.

    Accepts tensors with a batch dimension, non-empty str-keyed mappings and
    non-empty lists/tuples of them; every tensor leaf must have the same
    non-zero leading length, at least `parts`. Sizes follow
    `torch.tensor_split` (differ by at most one, earlier parts larger).
    Mappings are rebuilt as dicts, lists as lists, tuples as tuples (named
    tuples keep their type). Raises UnsafeBatchSplit otherwise.
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise UnsafeBatchSplit("parts must be positive")
    lengths: list[int] = []
    _collect_lengths(batch, lengths)
    if not lengths or len(set(lengths)) != 1 or lengths[0] == 0:
        raise UnsafeBatchSplit("tensor leaves must have one equal non-zero leading length")
    length = lengths[0]
    if length < parts:
        raise UnsafeBatchSplit("microbatch count exceeds batch length")
    import torch

    ranges = torch.tensor_split(torch.arange(length), parts)
    return [_take(batch, indices) for indices in ranges]


def _collect_lengths(value: object, lengths: list[int]) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise UnsafeBatchSplit("scalar tensor leaf has no batch dimension")
        lengths.append(int(value.shape[0]))
    elif isinstance(value, Mapping):
        if not value or not all(isinstance(key, str) for key in value):
            raise UnsafeBatchSplit("mapping leaves must be non-empty and string-keyed")
        for item in value.values():
            _collect_lengths(item, lengths)
    elif isinstance(value, (list, tuple)):
        if not value:
            raise UnsafeBatchSplit("sequence batch must be non-empty")
        for item in value:
            _collect_lengths(item, lengths)
    else:
        raise UnsafeBatchSplit(f"unsupported batch leaf: {type(value).__name__}")


def _take(value: object, indices: torch.Tensor) -> object:
    import torch

    if isinstance(value, torch.Tensor):
        # A gathered copy (not a view): each microbatch is a fresh, aligned tensor.
        return value.index_select(0, indices.to(value.device))
    if isinstance(value, Mapping):
        return {key: _take(item, indices) for key, item in value.items()}
    items = [_take(item, indices) for item in value]  # type: ignore[attr-defined]
    if isinstance(value, tuple):
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return items


def split_for_case(case: object, batch: object, count: int) -> list[object]:
    """The case's own `split_batch(batch, count)` when it has one, else split_tensor_tree."""
    splitter = getattr(case, "split_batch", None)
    if not callable(splitter):
        return split_tensor_tree(batch, count)
    parts = splitter(batch, count)
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
        raise UnsafeBatchSplit("explicit splitter must return an ordered sequence")
    if len(parts) != count:
        raise UnsafeBatchSplit("explicit splitter returned the wrong microbatch count")
    return list(parts)
