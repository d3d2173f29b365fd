"""Every figure of a report, as inline SVG: no script, no network, the same bytes for the same data."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["drift_svg", "error_growth_svg"]


def drift_svg(drift: list[dict[str, Any]] | tuple, first_step: int | None) -> str:
    """The drift curve as inline SVG: log-scale error axis, one line per component, no script.

    Steps where a component's error is 0 (identical) are drawn on the bottom
    edge; the first divergent step is marked by a dashed vertical line.
    """
    width, height, left, right, top, bottom = 640, 260, 64, 150, 16, 36
    plot_width, plot_height = width - left - right, height - top - bottom
    steps = [point["step"] for point in drift]
    errors = [
        error
        for point in drift
        for error in point["components"].values()
        if error > 0 and math.isfinite(error)
    ]
    low = math.floor(math.log10(min(errors))) if errors else -8
    high = math.ceil(math.log10(max(errors))) if errors else 0
    high = max(high, low + 1)
    first, last = (min(steps), max(steps)) if steps else (0, 1)
    span = max(last - first, 1)

    def x(step: float) -> float:
        return left + (step - first) / span * plot_width

    def y(error: float) -> float:
        if not error > 0:
            return top + plot_height
        exponent = min(max(math.log10(error) if math.isfinite(error) else high, low), high)
        return top + (high - exponent) / (high - low) * plot_height

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="trainparity-drift" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        'aria-label="relative RMS error per step">',
        f'<rect x="{left}" y="{top}" width="{plot_width}" height="{plot_height}" '
        'fill="#ffffff" stroke="#57606a"/>',
    ]
    for exponent in range(low, high + 1):
        level = y(10.0**exponent)
        parts.append(
            f'<line x1="{left}" y1="{level:.1f}" x2="{left + plot_width}" y2="{level:.1f}" '
            'stroke="#d0d7de" stroke-width="0.5"/>'
            f'<text x="{left - 6}" y="{level + 4:.1f}" font-size="10" text-anchor="end" '
            f'font-family="sans-serif">1e{exponent}</text>'
        )
    for step in sorted(set(steps))[:: max(1, len(set(steps)) // 10)]:
        parts.append(
            f'<text x="{x(step):.1f}" y="{top + plot_height + 14}" font-size="10" '
            f'text-anchor="middle" font-family="sans-serif">{step}</text>'
        )
    parts.append(
        f'<text x="{left + plot_width / 2:.1f}" y="{height - 4}" font-size="11" '
        'text-anchor="middle" font-family="sans-serif">step</text>'
    )
    if first_step is not None:
        marker = x(first_step)
        parts.append(
            f'<line class="first-divergent-step" x1="{marker:.1f}" y1="{top}" x2="{marker:.1f}" '
            f'y2="{top + plot_height}" stroke="#cf222e" stroke-dasharray="4 3"/>'
        )
    components = sorted({name for point in drift for name in point["components"]})
    palette = ("#0969da", "#1a7f37", "#9a6700", "#8250df", "#bf3989", "#57606a")
    for index, component in enumerate(components):
        colour = palette[index % len(palette)]
        points = " ".join(
            f"{x(point['step']):.1f},{y(point['components'].get(component, 0.0)):.1f}"
            for point in drift
        )
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{points}"/>'
        )
        legend_y = top + 14 + 16 * index
        parts.append(
            f'<line x1="{left + plot_width + 12}" y1="{legend_y - 4}" '
            f'x2="{left + plot_width + 30}" y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{left + plot_width + 34}" y="{legend_y}" font-size="11" '
            f'font-family="sans-serif">{_escape(component)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def error_growth_svg(report: Mapping[str, Any]) -> str:
    """The relative error of each differing op along the op sequence: an inline SVG, no script.

    x is the op's position among the ops compared, y the relative error on a
    log scale; an error that is not known (no summaries) or 0 sits on the
    bottom edge as a hollow mark; the first divergence is a dashed red line.
    """
    width, height, left, right, top, bottom = 720, 240, 64, 16, 16, 40
    count = max(int(report.get("compared_op_count") or 0), 1)
    points = [(int(position), float(error)) for position, error in report["error_growth"]]
    known = [error for _, error in points if math.isfinite(error) and error > 0]
    low = math.floor(math.log10(min(known))) if known else -8
    high = math.ceil(math.log10(max(known))) if known else 0
    high = max(high, low + 1)
    plot_width, plot_height = width - left - right, height - top - bottom

    def x_of(position: int) -> float:
        return left + plot_width * (position + 0.5) / count

    def y_of(error: float) -> float:
        return top + plot_height * (high - math.log10(error)) / (high - low)

    # One mark per pixel column (the largest error there), so 10k ops stay a small figure.
    columns: dict[int, tuple[int, float]] = {}
    for position, error in points:
        column = int(x_of(position))
        value = error if math.isfinite(error) and error > 0 else -1.0
        if column not in columns or value > columns[column][1]:
            columns[column] = (position, value)
    parts = [
        f"<figure class='tp-error-growth'><svg xmlns='http://www.w3.org/2000/svg' "
        f"width='{width}' height='{height}' viewBox='0 0 {width} {height}' role='img' "
        f"aria-label='relative error along the op sequence'>",
        f"<rect x='{left}' y='{top}' width='{plot_width}' height='{plot_height}' "
        "fill='#fff' stroke='#d0d7de'/>",
    ]
    for exponent in range(low, high + 1):
        y = y_of(10.0**exponent)
        parts.append(
            f"<line x1='{left}' x2='{left + plot_width}' y1='{y:.1f}' y2='{y:.1f}' "
            f"stroke='#eaeef2'/><text x='{left - 6}' y='{y + 4:.1f}' font-size='11' "
            f"text-anchor='end' fill='#57606a'>1e{exponent}</text>"
        )
    first = report.get("first_divergence")
    if isinstance(first, Mapping):
        x = x_of(int(first["position"]))
        label = f"first divergence: {first['op']} in {first['module'] or '(top level)'}"
        anchor = "start" if x < left + plot_width / 2 else "end"
        offset = 4 if anchor == "start" else -4
        parts.append(
            f"<line class='tp-first-divergence' x1='{x:.1f}' x2='{x:.1f}' y1='{top}' "
            f"y2='{top + plot_height}' stroke='#cf222e' stroke-dasharray='4 3'/>"
            f"<text x='{x + offset:.1f}' y='{top + 12}' font-size='11' fill='#cf222e' "
            f"text-anchor='{anchor}'>{_escape(label)}</text>"
        )
    marks = sorted(columns.values())
    line = [(x_of(p), y_of(e)) for p, e in marks if e > 0]
    if len(line) > 1:
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in line)
        parts.append(f"<polyline points='{path}' fill='none' stroke='#0969da' stroke-width='1'/>")
    for position, error in marks:
        if error > 0:
            parts.append(
                f"<circle cx='{x_of(position):.1f}' cy='{y_of(error):.1f}' r='2.5' fill='#0969da'>"
                f"<title>op {position}: {error:.3e}</title></circle>"
            )
        else:
            parts.append(
                f"<circle cx='{x_of(position):.1f}' cy='{top + plot_height:.1f}' r='2.5' "
                f"fill='none' stroke='#9a6700'><title>op {position}: error unknown</title></circle>"
            )
    parts.append(
        f"<text x='{left + plot_width / 2}' y='{height - 8}' font-size='12' text-anchor='middle' "
        f"fill='#1f2328'>op position ({count} ops compared)</text>"
        f"<text x='14' y='{top + plot_height / 2}' font-size='12' text-anchor='middle' "
        f"fill='#1f2328' transform='rotate(-90 14 {top + plot_height / 2})'>relative error</text>"
        "</svg><figcaption>Relative error of each op output that differs, along the op "
        "sequence (lower bounds from the summaries unless values were kept).</figcaption>"
        "</figure>"
    )
    return "".join(parts)


def _escape(value: Any) -> str:
    return html.escape(str(value), quote=True)
