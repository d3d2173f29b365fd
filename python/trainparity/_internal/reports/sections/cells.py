"""The `Section` type and the formatting of the values in its cells.

Every section builder and every renderer shares this vocabulary, so one value
reads the same in every section and in text and HTML alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NOT_AVAILABLE", "Section", "number_cell", "seconds_cell", "text_cell"]

NOT_AVAILABLE = "n/a"


@dataclass(frozen=True)
class Section:
    """One titled block of a report view: (key, value) rows when `columns` is empty, else a table."""

    title: str
    rows: tuple[tuple[str, ...], ...]
    columns: tuple[str, ...] = ()
    # Shown whole whatever max_rows: its rows are bounded by the processes a check starts.
    whole: bool = False


def text_cell(value: Any) -> str:
    if value is None:
        return NOT_AVAILABLE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number_cell(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(text_cell(item) for item in value) if value else "(none)"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={text_cell(item)}" for key, item in value.items())
    return str(value)


def number_cell(value: Any) -> str:
    if value is None:
        return NOT_AVAILABLE
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.3e}" if value and not 1e-3 <= abs(value) < 1e4 else f"{value:.6g}"
    return str(value)


def seconds_cell(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else NOT_AVAILABLE
