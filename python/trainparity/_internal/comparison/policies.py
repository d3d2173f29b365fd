"""Comparison policies and the deterministic traversal that finds the first difference."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Union

from trainparity._internal.comparison.tensors import TensorValueComparison, compare_tensor_values
from trainparity._internal.native.dtypes import info_for_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenSequence,
    FrozenTensor,
    FrozenValue,
    freeze,
    mapping_key_order,
)
from trainparity._internal.state.paths import StatePath, render_path
from trainparity._internal.state.snapshot import Snapshot

__all__ = [
    "ComparisonPolicy",
    "ComparisonResult",
    "Difference",
    "ExactComparison",
    "TensorRecord",
    "ToleranceComparison",
    "collect_differences",
    "policy_report_fields",
]

MISSING = "<missing>"
_ABSENT = object()


@dataclass(frozen=True)
class Difference:
    """One observed difference: where, why, short summaries of both sides, error magnitudes."""

    path: str
    reason: str
    baseline: str
    candidate: str
    max_abs_error: float | None = None
    max_rel_error: float | None = None


@dataclass(frozen=True)
class ComparisonResult:
    """PASS with no difference, or FAIL with the first observed difference."""

    outcome: Outcome
    first_difference: Difference | None
    message: str


@dataclass(frozen=True)
class TensorRecord:
    """Per-tensor evidence gathered during a traversal (every tensor pair with equal metadata)."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    values: TensorValueComparison
    baseline: FrozenTensor = field(repr=False, compare=False)
    candidate: FrozenTensor = field(repr=False, compare=False)


class _Policy:
    """Shared traversal; subclasses decide how tensor values and floats are judged."""

    name = "exact"

    def compare(self, baseline: object, candidate: object) -> ComparisonResult:
        differences = _Traversal(self, stop_at_first=True).run(baseline, candidate)
        if not differences:
            return ComparisonResult(Outcome.PASS, None, "snapshots are equivalent under policy")
        first = differences[0]
        return ComparisonResult(
            Outcome.FAIL, first, f"first observed divergence at {first.path}: {first.reason}"
        )

    def compare_all(self, baseline: object, candidate: object) -> tuple[Difference, ...]:
        return tuple(_Traversal(self, stop_at_first=False).run(baseline, candidate))

    # Policy hooks -----------------------------------------------------------------

    def tensor_values(
        self, baseline: FrozenTensor, candidate: FrozenTensor
    ) -> TensorValueComparison:
        return compare_tensor_values(baseline, candidate)

    def tensor_magnitudes_reported(self, dtype_is_floating: bool) -> bool:
        return dtype_is_floating

    def floats_equal(self, baseline: float, candidate: float) -> bool:
        return struct.pack(">d", baseline) == struct.pack(">d", candidate)


class ExactComparison(_Policy):
    """Structure, types, metadata and bits must match."""

    name = "exact"

    def __repr__(self) -> str:
        return "ExactComparison()"

    def __eq__(self, other: object) -> bool:
        return type(other) is ExactComparison

    def __hash__(self) -> int:
        return hash(ExactComparison)


class ToleranceComparison(_Policy):
    """Numeric values may differ by `atol + rtol*|candidate|` (tensors); all else stays exact."""

    name = "explicit_tolerance"

    def __init__(self, *, rtol: float, atol: float, equal_nan: bool = False) -> None:
        if not _is_finite_non_negative(rtol) or not _is_finite_non_negative(atol):
            raise ValueError("rtol and atol must be finite and non-negative")
        if not isinstance(equal_nan, bool):
            raise TypeError(f"equal_nan must be a bool, got {type(equal_nan).__name__}")
        self.rtol = float(rtol)
        self.atol = float(atol)
        self.equal_nan = equal_nan

    def __repr__(self) -> str:
        return f"ToleranceComparison(rtol={self.rtol!r}, atol={self.atol!r}, equal_nan={self.equal_nan!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToleranceComparison) and (
            (self.rtol, self.atol, self.equal_nan) == (other.rtol, other.atol, other.equal_nan)
        )

    def __hash__(self) -> int:
        return hash((ToleranceComparison, self.rtol, self.atol, self.equal_nan))

    def tensor_values(
        self, baseline: FrozenTensor, candidate: FrozenTensor
    ) -> TensorValueComparison:
        return compare_tensor_values(
            baseline, candidate, rtol=self.rtol, atol=self.atol, equal_nan=self.equal_nan
        )

    def tensor_magnitudes_reported(self, dtype_is_floating: bool) -> bool:
        return True

    def floats_equal(self, baseline: float, candidate: float) -> bool:
        if math.isnan(baseline) or math.isnan(candidate):
            return self.equal_nan and math.isnan(baseline) and math.isnan(candidate)
        if math.isinf(baseline) or math.isinf(candidate):
            return baseline == candidate
        return math.isclose(baseline, candidate, rel_tol=self.rtol, abs_tol=self.atol)


ComparisonPolicy = Union[ExactComparison, ToleranceComparison]  # noqa: UP007 - runtime alias


def policy_report_fields(policy: object) -> dict[str, Any]:
    """The report keys that name a result's comparison policy (and its tolerance, if any)."""
    if isinstance(policy, ToleranceComparison):
        return {
            "comparison_policy": ToleranceComparison.name,
            "comparison_rtol": policy.rtol,
            "comparison_atol": policy.atol,
            "comparison_equal_nan": policy.equal_nan,
        }
    noise_name = getattr(policy, "name", None)
    if noise_name == "noise_envelope":  # NoiseComparison: its settings are under noise_envelope
        return {"comparison_policy": noise_name}
    return {"comparison_policy": "exact"}


def _is_finite_non_negative(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return math.isfinite(value) and value >= 0


# Traversal ----------------------------------------------------------------------------


def collect_differences(
    policy: ComparisonPolicy,
    baseline: object,
    candidate: object,
    *,
    on_tensor: Callable[[TensorRecord], None] | None = None,
) -> tuple[Difference, ...]:
    """Every difference in traversal order, reporting each compared tensor pair to `on_tensor`."""
    return tuple(
        _Traversal(policy, stop_at_first=False, on_tensor=on_tensor).run(baseline, candidate)
    )


class _Traversal:
    """Depth-first pre-order walk over two frozen trees (docs/compatibility.md, "Comparison")."""

    def __init__(
        self,
        policy: _Policy,
        *,
        stop_at_first: bool,
        on_tensor: Callable[[TensorRecord], None] | None = None,
    ) -> None:
        self.policy = policy
        self.stop_at_first = stop_at_first
        self.on_tensor = on_tensor
        self.differences: list[Difference] = []

    def run(self, baseline: object, candidate: object) -> list[Difference]:
        if isinstance(baseline, Snapshot) and isinstance(candidate, Snapshot):
            for field_name in ("schema_version", "backend", "step"):
                left, right = getattr(baseline, field_name), getattr(candidate, field_name)
                if type(left) is not type(right) or left != right:
                    self._add(Difference(field_name, field_name, repr(left), repr(right)))
            if self._done():
                return self.differences
            baseline, candidate = baseline.state, candidate.state
        self._walk(_as_frozen(baseline), _as_frozen(candidate))
        return self.differences

    def _done(self) -> bool:
        return self.stop_at_first and bool(self.differences)

    def _add(self, difference: Difference) -> None:
        self.differences.append(difference)

    def _walk(self, baseline: object, candidate: object) -> None:
        """Iterative walk (explicit stack), so deep trees never hit the recursion limit."""
        stack: list[tuple[object, object, StatePath]] = [(baseline, candidate, ())]
        while stack and not self._done():
            left, right, where = stack.pop()
            children = self._node(left, right, where)
            stack.extend(reversed(children))

    def _node(self, left: object, right: object, path: StatePath) -> list:
        if left is _ABSENT or right is _ABSENT:
            reason = "missing_candidate" if right is _ABSENT else "missing_baseline"
            self._add(Difference(render_path(path), reason, summarize(left), summarize(right)))
            return []
        if type(left) is not type(right):
            self._add(Difference(render_path(path), "type", summarize(left), summarize(right)))
            return []
        if isinstance(left, FrozenMapping):
            return _mapping_children(left, right, path)  # type: ignore[arg-type]
        if isinstance(left, FrozenSequence):
            return self._sequence(left, right, path)  # type: ignore[arg-type]
        if isinstance(left, FrozenTensor):
            self._tensor(left, right, path)  # type: ignore[arg-type]
            return []
        if isinstance(left, float):
            if not self.policy.floats_equal(left, right):  # type: ignore[arg-type]
                self._value_difference(left, right, path)
            return []
        if left != right:
            self._value_difference(left, right, path)
        return []

    def _value_difference(self, left: object, right: object, path: StatePath) -> None:
        self._add(Difference(render_path(path), "value", summarize(left), summarize(right)))

    def _sequence(self, left: FrozenSequence, right: FrozenSequence, path: StatePath) -> list:
        if left.kind != right.kind:
            self._add(
                Difference(render_path(path), "sequence_kind", repr(left.kind), repr(right.kind))
            )
            return []
        if len(left.items) != len(right.items):
            self._add(
                Difference(
                    render_path(path),
                    "sequence_length",
                    repr(len(left.items)),
                    repr(len(right.items)),
                )
            )
            return []
        return [
            (a, b, (*path, index))
            for index, (a, b) in enumerate(zip(left.items, right.items, strict=True))
        ]

    def _tensor(self, left: FrozenTensor, right: FrozenTensor, path: StatePath) -> None:
        if left.placement != right.placement:
            # Shards of different layouts cover different elements: their shapes and values
            # say nothing until reassembled (recording/sharded.py does that across ranks).
            self._add(
                Difference(
                    render_path(path),
                    "tensor_placement",
                    _placement_text(left),
                    _placement_text(right),
                )
            )
            return
        for field_name, reason in (
            ("shape", "tensor_shape"),
            ("dtype", "tensor_dtype"),
            ("device", "tensor_device"),
            ("requires_grad", "tensor_requires_grad"),
        ):
            left_field, right_field = getattr(left, field_name), getattr(right, field_name)
            if left_field != right_field:
                self._add(
                    Difference(render_path(path), reason, repr(left_field), repr(right_field))
                )
                return
        values = self.policy.tensor_values(left, right)
        rendered = render_path(path)
        if self.on_tensor is not None:
            self.on_tensor(TensorRecord(rendered, left.dtype, left.shape, values, left, right))
        if values.equal:
            return
        reported = self.policy.tensor_magnitudes_reported(info_for_text(left.dtype).is_floating)
        self._add(
            Difference(
                rendered,
                "tensor_value",
                summarize(left),
                summarize(right),
                values.max_abs_error if reported else None,
                values.max_rel_error if reported else None,
            )
        )


def _mapping_children(left: FrozenMapping, right: FrozenMapping, path: StatePath) -> list:
    # Keyed by kind and value, so an int key 2 and a str key "2" (or 1 and True) never pair up.
    left_entries = {mapping_key_order(key): item for key, item in left.entries}
    right_entries = {mapping_key_order(key): item for key, item in right.entries}
    keys = sorted(set(left_entries) | set(right_entries))
    return [
        (left_entries.get(key, _ABSENT), right_entries.get(key, _ABSENT), (*path, key[1]))
        for key in keys
    ]


def _as_frozen(value: object) -> FrozenValue:
    if isinstance(value, (FrozenMapping, FrozenSequence, FrozenTensor)):
        return value
    return freeze(value, copy=False)


def _placement_text(tensor: FrozenTensor) -> str:
    return tensor.placement.describe() if tensor.placement else "not sharded"


def summarize(value: object) -> str:
    """The short text a Difference shows for one side (docs/compatibility.md, "Comparison")."""
    if value is _ABSENT:
        return MISSING
    if isinstance(value, FrozenTensor):
        if value.data is None:  # digest-only snapshot: the values were never recorded
            values = f"<digest {value.digest.hex()[:16]}>" if value.digest else "<not recorded>"
        else:
            values = repr(value.leading_values(4))
        shard = f", shard of {value.placement.describe()}" if value.placement else ""
        return f"tensor(shape={value.shape!r}, dtype={value.dtype}, device={value.device}{shard}, values={values})"
    if isinstance(value, FrozenMapping):
        return f"mapping(keys={value.keys()!r})"
    if isinstance(value, FrozenSequence):
        return f"{value.kind}(length={len(value.items)})"
    return repr(value)
