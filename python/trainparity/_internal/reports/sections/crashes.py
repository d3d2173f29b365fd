"""The crash check's table: each crash point, what its restart loaded, the steps redone, the verdict."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainparity._internal.reports.sections.cells import Section, text_cell

__all__ = ["crash_points_section"]

_COLUMNS = ("crash point", "image", "restart loaded", "steps redone", "verdict", "what happened")


def crash_points_section(report: Mapping[str, Any]) -> Section | None:
    """The rows that did not pass first (in time order), then the others: a truncated table
    still shows the finding."""
    rows = report.get("crash_points")
    if not rows:
        return None
    ordered = [row for row in rows if row.get("verdict") != "PASS"]
    ordered += [row for row in rows if row.get("verdict") == "PASS"]
    cells = tuple(_cells(row) for row in ordered)
    failing = len(rows) - sum(1 for row in rows if row.get("verdict") == "PASS")
    title = f"Crash points ({len(rows)} rows, {failing} not passing, those first)"
    return Section(title, cells, _COLUMNS)


def _cells(row: Mapping[str, Any]) -> tuple[str, ...]:
    loss = row.get("loss")
    point = str(row.get("point"))
    if loss and loss != "process":
        point += f" [power loss: {loss}]"
    image = row.get("image") or "-"
    if row.get("same_image_as"):
        image = f"{image} (as {row['same_image_as']})"
    return (
        point,
        image,
        text_cell(row.get("loaded")) if row.get("loaded") is not None else "-",
        text_cell(row.get("steps_redone")),
        str(row.get("verdict")),
        str(row.get("detail", "")),
    )
