"""Every figure of a report, as inline SVG: no script, no network, the same bytes for the same data."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainparity._internal.reports.sections.noise import EnvelopePoint

__all__ = ["drift_svg", "error_growth_svg", "noise_envelope_svg"]


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


def noise_envelope_svg(
    points: Sequence[EnvelopePoint], factor: float, exit_step: int | None
) -> str:
    """The noise envelope per step as an inline SVG figure with its caption: log scale, no script.

    The samples' noise is a band from the bottom of the axis up to it, the
    limit a dashed line, each candidate's excursion a line with points; the
    step where the candidate left the envelope (`exit_step`, a FAIL's first
    divergent step) is a red dashed line with the points there ringed.
    """
    width, height, left, right, top, bottom = 660, 270, 64, 200, 16, 36
    plot_width, plot_height = width - left - right, height - top - bottom
    steps = [point.step for point in points]
    values = [
        value
        for point in points
        for value in (point.noise, point.limit, *(excursion for _, excursion in point.excursions))
        if value > 0 and math.isfinite(value)
    ]
    low = math.floor(math.log10(min(values))) if values else -8
    high = math.ceil(math.log10(max(values))) if values else 0
    high = max(high, low + 1)
    first, last = (min(steps), max(steps)) if steps else (0, 1)
    floor_y = top + plot_height

    def x(step: float) -> float:
        if last == first:  # one step: in the middle, not on the axis
            return left + plot_width / 2
        # Clamped: an exit step outside the recorded steps still marks the plot's edge.
        return left + min(max((step - first) / (last - first), 0.0), 1.0) * plot_width

    def y(value: float) -> float:
        # 0 (bit for bit) has no place on a log axis: it sits on the bottom edge.
        if not value > 0:
            return floor_y
        exponent = min(max(math.log10(value) if math.isfinite(value) else high, low), high)
        return top + (high - exponent) / (high - low) * plot_height

    parts = [
        f'<figure class="tp-noise-envelope-figure"><svg xmlns="http://www.w3.org/2000/svg" '
        f'class="trainparity-noise-envelope" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" '
        'aria-label="noise, limit and excursion per step (relative L2)">',
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
            f'<text x="{x(step):.1f}" y="{floor_y + 14}" font-size="10" '
            f'text-anchor="middle" font-family="sans-serif">{step}</text>'
        )
    parts.append(
        f'<text x="{left + plot_width / 2:.1f}" y="{height - 4}" font-size="11" '
        'text-anchor="middle" font-family="sans-serif">step</text>'
        f'<text x="12" y="{top + plot_height / 2:.1f}" font-size="11" text-anchor="middle" '
        f'font-family="sans-serif" transform="rotate(-90 12 {top + plot_height / 2:.1f})">'
        "relative L2</text>"
    )
    if points:
        # The band: up the noise curve, back along the bottom edge. A single step gets a
        # narrow column, since a band of zero width would not show.
        half = 5.0 if len(points) == 1 else 0.0
        upper = [(x(p.step) - half, y(p.noise)) for p in points]
        upper += [(x(p.step) + half, y(p.noise)) for p in points] if half else []
        upper.sort()
        outline = " ".join(f"{px:.1f},{py:.1f}" for px, py in upper)
        parts.append(
            f'<polygon class="tp-noise-band" fill="#d0d7de" fill-opacity="0.7" stroke="none" '
            f'points="{outline} {upper[-1][0]:.1f},{floor_y:.1f} {upper[0][0]:.1f},{floor_y:.1f}"/>'
            f'<polyline fill="none" stroke="#8c959f" stroke-width="1" points="{outline}"/>'
        )
        limit = " ".join(f"{x(p.step):.1f},{y(p.limit):.1f}" for p in points)
        parts.append(
            f'<polyline class="tp-noise-limit" fill="none" stroke="#57606a" stroke-width="1.5" '
            f'stroke-dasharray="6 4" points="{limit}"/>'
        )
    exit_x = x(exit_step) if exit_step is not None else None
    if exit_x is not None:
        # The label on the side with room, so it never runs into the legend.
        anchor, offset = ("start", 4) if exit_x < left + plot_width / 2 else ("end", -4)
        parts.append(
            f'<line class="tp-noise-exit" x1="{exit_x:.1f}" y1="{top}" x2="{exit_x:.1f}" '
            f'y2="{floor_y}" stroke="#cf222e" stroke-dasharray="4 3"/>'
            f'<text class="tp-noise-exit" x="{exit_x + offset:.1f}" y="{top + 12}" '
            f'font-size="10" text-anchor="{anchor}" fill="#cf222e" font-family="sans-serif">'
            f"first exit: step {exit_step}</text>"
        )
    candidates = sorted({name for point in points for name, _ in point.excursions})
    palette = ("#0969da", "#bf3989", "#1a7f37", "#8250df", "#9a6700")
    for index, candidate in enumerate(candidates):
        colour = palette[index % len(palette)]
        track = [
            (point, excursion)
            for point in points
            for name, excursion in point.excursions
            if name == candidate
        ]
        line = " ".join(f"{x(p.step):.1f},{y(e):.1f}" for p, e in track)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{line}"/>')
        for point, excursion in track:
            cx, cy = x(point.step), y(excursion)
            # Hollow where the excursion is 0: drawn on the edge, not measured there.
            fill = colour if excursion > 0 else "#ffffff"
            parts.append(
                f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="3" fill="{fill}" stroke="{colour}">'
                f"<title>step {point.step}, {_escape(candidate)}: excursion {excursion:.3e}, "
                f"limit {point.limit:.3e}, noise {point.noise:.3e}</title></circle>"
            )
            if point.step == exit_step:
                parts.append(
                    f'<circle class="tp-noise-exit" cx="{cx:.1f}" cy="{cy:.1f}" r="7" '
                    'fill="none" stroke="#cf222e" stroke-width="2"/>'
                )
    legend_x = left + plot_width + 12
    legend = [
        (
            f'<rect x="{legend_x}" y="{{y}}" width="18" height="8" fill="#d0d7de" '
            'stroke="#8c959f"/>',
            "noise of the samples",
        ),
        (
            f'<line x1="{legend_x}" y1="{{mid}}" x2="{legend_x + 18}" y2="{{mid}}" '
            'stroke="#57606a" stroke-width="1.5" stroke-dasharray="6 4"/>',
            f"limit ({factor:g}× noise + floor)",
        ),
    ]
    for index, candidate in enumerate(candidates):
        colour = palette[index % len(palette)]
        legend.append(
            (
                f'<line x1="{legend_x}" y1="{{mid}}" x2="{legend_x + 18}" y2="{{mid}}" '
                f'stroke="{colour}" stroke-width="2"/>',
                f"excursion: {candidate}",
            )
        )
    for index, (mark, label) in enumerate(legend):
        row_y = top + 14 + 16 * index
        parts.append(
            mark.format(y=row_y - 8, mid=row_y - 4)
            + f'<text x="{legend_x + 22}" y="{row_y}" font-size="11" '
            f'font-family="sans-serif">{_escape(label)}</text>'
        )
    parts.append(
        "</svg><figcaption>Per step, the largest value over components and ranks (relative L2): "
        f"the noise among the samples (grey band), the limit {factor:g}× noise + floor "
        "(dashed) and the candidate's excursion from the nearest sample (points). "
        + (
            # Per path, a step can leave the envelope while these maxima stay inside it.
            "The verdict is per path, so the first exit (red) is marked where the check found it. "
            if exit_step is not None
            else ""
        )
        + "A value of 0 (bit for bit) cannot be drawn on a log axis: it sits on the bottom "
        "edge, its point hollow.</figcaption></figure>"
    )
    return "".join(parts)


def _escape(value: Any) -> str:
    return html.escape(str(value), quote=True)
