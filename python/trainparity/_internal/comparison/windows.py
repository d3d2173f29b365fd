"""The elements around a tensor's first differing element: what a report previews.

A Difference's summary shows a tensor's first four values (docs/compatibility.md, "Comparison");
for a large tensor those are usually equal on both sides, so a report that
showed only them would hide the difference. A ValueWindow holds a few
elements on each side of the first element that differs (flat, row-major
index), so the two previews a reader compares are the ones that part.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    Difference,
    TensorRecord,
    collect_differences,
)

__all__ = ["ValueWindow", "differences_with_windows", "value_window"]

WINDOW_WIDTH = 5


@dataclass(frozen=True)
class ValueWindow:
    """`baseline`/`candidate` hold the flat elements `start` … `start + len - 1`; `index` differs first."""

    path: str
    index: int
    start: int
    baseline: tuple[Any, ...]
    candidate: tuple[Any, ...]


def value_window(record: TensorRecord, width: int = WINDOW_WIDTH) -> ValueWindow | None:
    """The window centred on the record's first differing element; None when it is unknown."""
    index = record.values.first_mismatch_index
    if index is None or record.baseline.data is None or record.candidate.data is None:
        return None  # equal tensors, or digest-only snapshots: no element is known to differ
    numel = record.baseline.numel
    start = max(0, min(index - width // 2, numel - width))
    stop = min(numel, start + width)
    return ValueWindow(
        path=record.path,
        index=index,
        start=start,
        baseline=tuple(record.baseline.value_at(at) for at in range(start, stop)),
        candidate=tuple(record.candidate.value_at(at) for at in range(start, stop)),
    )


class WindowCollector:
    """An `on_tensor` callback that keeps the window of every tensor whose values differ."""

    def __init__(self) -> None:
        self.windows: list[ValueWindow] = []

    def __call__(self, record: TensorRecord) -> None:
        window = value_window(record)
        if window is not None:
            self.windows.append(window)


def differences_with_windows(
    policy: ComparisonPolicy, baseline: object, candidate: object
) -> tuple[tuple[Difference, ...], tuple[ValueWindow, ...]]:
    """Every difference (as `policy.compare_all`) and, in the same order, the differing tensors' windows."""
    collector = WindowCollector()
    differences = collect_differences(policy, baseline, candidate, on_tensor=collector)
    return differences, tuple(collector.windows)
