"""`assert_parity`: assert two training states are equal, with a message that says where and how much."""

from __future__ import annotations

import math

from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    Difference,
    TensorRecord,
    ToleranceComparison,
)
from trainparity._internal.comparison.states import StateComparison, compare_states_with_records
from trainparity._internal.reports.terminal_text import printable

__all__ = ["assert_parity"]

_MORE_PATHS_SHOWN = 5


def assert_parity(
    baseline: object,
    candidate: object,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    comparison: ComparisonPolicy | None = None,
    msg: str | None = None,
) -> StateComparison:
    """Raise AssertionError unless `candidate` matches `baseline` (exact unless told otherwise).

    Give either `rtol` and `atol` together (a ToleranceComparison is built),
    or an explicit `comparison`, or neither (exact). The message names the
    first differing path, how many elements differ out of how many, the first
    mismatching index with both values, and the largest errors, in the spirit
    of torch.testing.assert_close. Returns the comparison when the states match.
    """
    policy = _policy(rtol, atol, equal_nan, comparison)
    result, records = compare_states_with_records(baseline, candidate, policy)
    if result.first_difference is None:
        return result
    lines = _describe(result.first_difference, records, policy)
    others = result.differences[1:]
    if others:
        shown = ", ".join(f"{d.path} ({d.reason})" for d in others[:_MORE_PATHS_SHOWN])
        hidden = len(others) - _MORE_PATHS_SHOWN
        lines.append(
            f"{len(others)} more differing path(s): {shown}"
            + (f", ... (+{hidden})" if hidden > 0 else "")
        )
    # Paths come from the states; the caller's own msg is theirs to format.
    lines = [printable(line) for line in lines]
    if msg:
        lines.insert(0, msg)
    raise AssertionError("\n".join(lines))


def _policy(rtol, atol, equal_nan, comparison) -> ComparisonPolicy | None:
    if comparison is not None:
        if rtol is not None or atol is not None:
            raise ValueError("pass either comparison= or rtol=/atol=, not both")
        return comparison
    if (rtol is None) != (atol is None):
        raise ValueError(
            "rtol and atol must be given together (or neither, for an exact comparison)"
        )
    if rtol is None:
        return None
    return ToleranceComparison(rtol=rtol, atol=atol, equal_nan=equal_nan)


def _describe(first: Difference, records: list[TensorRecord], policy) -> list[str]:
    record = next((r for r in records if r.path == first.path), None)
    if first.reason != "tensor_value" or record is None:
        return [
            f"States differ at {first.path} ({first.reason}).",
            f"baseline:  {first.baseline}",
            f"candidate: {first.candidate}",
        ]
    values = record.values
    lines = [f"Tensors differ at {first.path} (dtype {record.dtype}, shape {tuple(record.shape)})."]
    if values.mismatch_count is None:
        lines.append("Only digests were recorded: the values differ, position unknown.")
        return lines
    share = 100.0 * values.mismatch_count / max(values.numel, 1)
    lines.append(f"Mismatched elements: {values.mismatch_count} / {values.numel} ({share:.1f}%)")
    index = values.first_mismatch_index
    if index is not None:
        position = _unravel(index, record.shape)
        lines.append(
            f"First mismatch at index {position} (flat {index}): "
            f"baseline {record.baseline.value_at(index)!r}, candidate {record.candidate.value_at(index)!r}"
        )
    tolerance = isinstance(policy, ToleranceComparison)
    if values.max_abs_error is not None and (tolerance or first.max_abs_error is not None):
        allowed = (
            f" (allowed: atol {policy.atol} + rtol {policy.rtol} * |candidate|)"
            if tolerance
            else ""
        )
        lines.append(f"Greatest absolute difference: {values.max_abs_error!r}{allowed}")
        lines.append(f"Greatest relative difference: {values.max_rel_error!r}")
        if values.relative_rms_error is not None and math.isfinite(values.relative_rms_error):
            lines.append(f"Relative RMS error: {values.relative_rms_error:.3e}")
    return lines


def _unravel(index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    position = []
    for size in reversed(shape):
        position.append(index % size)
        index //= size
    return tuple(reversed(position))
