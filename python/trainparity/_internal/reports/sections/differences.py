"""Sections of a state comparison: differences, worst tensors, variants, drift.

Resume, runs and accumulation checks, snapshot diffs and recording diffs all
report differences between states; these sections show them, with the values
around the first differing element, the variants compared and the drift curve
step by step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainparity._internal.reports.diagnosis import causes_first
from trainparity._internal.reports.sections.cells import Section, number_cell, text_cell

__all__ = [
    "differences_section",
    "drift_points",
    "drift_section",
    "first_divergence_section",
    "value_window",
    "variant_comparisons_section",
    "window_rows",
    "worst_tensors_section",
]


def differences_section(report: Mapping[str, Any]) -> Section | None:
    """Every difference the verdict counts, exact state (likelier causes) first, then traversal
    order; long lists say how many are hidden."""
    differences = causes_first(report.get("all_differences") or ())
    if not differences:
        return None
    rows = tuple(
        (
            str(item["path"]),
            str(item["reason"]),
            text_cell(item.get("baseline")),
            text_cell(item.get("candidate")),
        )
        for item in differences
    )
    return Section("Differences", rows, ("path", "reason", "baseline", "candidate"))


def first_divergence_section(report: Mapping[str, Any]) -> Section | None:
    first = report.get("primary_difference")
    if not isinstance(first, Mapping):
        return None
    rows = [
        ("path", str(first["path"])),
        ("reason", str(first["reason"])),
        ("baseline", str(first["baseline"])),
        ("candidate", str(first["candidate"])),
    ]
    for key, label in (("max_abs_error", "max abs error"), ("max_rel_error", "max rel error")):
        if first.get(key) is not None:
            rows.append((label, number_cell(first[key])))
    rows += window_rows(report, str(first["path"]))
    return Section("First divergence", tuple(rows))


def value_window(report: Mapping[str, Any], path: str) -> Mapping[str, Any] | None:
    """The report's window around the first differing element of `path`'s tensor, if it has one."""
    return next((item for item in report.get("value_windows") or () if item["path"] == path), None)


def window_rows(report: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """The elements around the path's first differing element, when the report holds them."""
    window = value_window(report, path)
    if window is None:
        return []
    start, index = window["start"], window["index"]
    last = start + len(window["baseline"]) - 1

    def shown(values: Sequence[Any]) -> str:
        # Every digit (a rounded preview could show two different values alike); the first
        # differing element is bracketed, so the eye finds it in the row.
        return ", ".join(
            f"[{value!r}]" if start + offset == index else repr(value)
            for offset, value in enumerate(values)
        )

    return [
        ("first differing element", f"flat index {index} (row-major)"),
        (f"baseline [{start}..{last}]", shown(window["baseline"])),
        (f"candidate [{start}..{last}]", shown(window["candidate"])),
    ]


def variant_comparisons_section(report: Mapping[str, Any]) -> Section | None:
    comparisons = report.get("variant_comparisons")
    if not comparisons:
        return None
    rows = tuple(
        (
            "its two runs" if item["variant"] == item["reference"] else f"vs {item['reference']}",
            str(item["variant"]),
            str(item["outcome"]),
            str(item["difference_count"]),
            text_cell(item.get("first_path")),
            number_cell(item.get("max_abs_error")),
        )
        for item in comparisons
    )
    return Section(
        "Variants",
        rows,
        ("compared", "variant", "outcome", "differences", "first path", "max abs error"),
    )


def worst_tensors_section(report: Mapping[str, Any]) -> Section | None:
    if "differing_tensors" in report:
        rows = tuple(
            (
                str(stats["path"]),
                str(stats["dtype"]).removeprefix("torch."),
                "x".join(str(size) for size in stats["shape"]) or "scalar",
                _mismatches(stats),
                number_cell(stats["max_abs_error"]),
                number_cell(stats["max_rel_error"]),
                number_cell(stats["relative_rms_error"]),
            )
            for stats in report["differing_tensors"]
        )
        columns = ("path", "dtype", "shape", "mismatched", "max abs", "max rel", "rel RMS")
        return Section("Worst tensors", rows, columns) if rows else None
    tensor_differences = [
        item
        for item in report.get("all_differences") or ()
        if item["reason"] == "tensor_value" and item.get("max_rel_error") is not None
    ]
    if not tensor_differences:
        return None
    ranked = sorted(tensor_differences, key=lambda item: -_sortable(item["max_rel_error"]))
    rows = tuple(
        (
            str(item["path"]),
            number_cell(item["max_abs_error"]),
            number_cell(item["max_rel_error"]),
        )
        for item in ranked
    )
    return Section("Worst tensors", rows, ("path", "max abs", "max rel"))


def drift_points(report: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """A report's drift curve: a recording diff's `drift`, or a check's `trajectory.drift`."""
    if report.get("drift"):
        return report["drift"]
    trajectory = report.get("trajectory")
    return (trajectory.get("drift") or ()) if isinstance(trajectory, Mapping) else ()


def drift_section(report: Mapping[str, Any]) -> Section | None:
    """A drift curve as a table: max relative RMS error per step and component."""
    drift = drift_points(report)
    if not drift:
        return None
    components = sorted({name for point in drift for name in point["components"]})
    first = report.get("first_divergent_step")
    rows = tuple(
        (
            f"{point['step']}{' *' if point['step'] == first else ''}",
            number_cell(point["max_relative_rms_error"]),
            *(number_cell(point["components"].get(name, 0.0)) for name in components),
        )
        for point in drift
    )
    return Section(
        "Drift (relative RMS error; * first divergent step)",
        rows,
        ("step", "max", *components),
    )


def _mismatches(stats: Mapping[str, Any]) -> str:
    if stats["mismatch_count"] is None:
        return "digest differs"
    return f"{stats['mismatch_count']}/{stats['numel']}"


def _sortable(value: Any) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.inf
    return float(value)
