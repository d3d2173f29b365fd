"""A report as a self-contained HTML fragment, for notebooks and the HTML page.

The fragment carries its own style and no script: an outcome badge, the
message, the drift curve, the noise envelope (under NoiseComparison) and each
section as a table. Results use it as their `_repr_html_`, and reports/html.py
wraps it in a whole page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from trainparity._internal.reports.figures import drift_svg, error_growth_svg, noise_envelope_svg
from trainparity._internal.reports.sections.cells import Section
from trainparity._internal.reports.sections.differences import drift_points
from trainparity._internal.reports.sections.noise import (
    envelope_points,
    exit_step_of,
    noise_envelope,
    noise_envelope_section,
)
from trainparity._internal.reports.sections.report import report_sections
from trainparity._internal.reports.text_views import headline, message_detail

__all__ = ["OUTCOME_COLOURS", "html_fragment", "html_section", "result_html"]

OUTCOME_COLOURS = {
    "PASS": "#1a7f37",
    "FAIL": "#cf222e",
    "ABSTAIN": "#9a6700",
    "ERROR": "#6639ba",
}

_FRAGMENT_STYLE = """
.trainparity-result { font-family: system-ui, sans-serif; font-size: 14px; line-height: 1.4; }
.trainparity-result .tp-badge { display: inline-block; color: #fff; font-weight: 700;
  padding: 2px 10px; border-radius: 4px; margin-right: 8px; letter-spacing: 0.04em; }
.trainparity-result h3 { font-size: 15px; margin: 14px 0 4px; }
.trainparity-result table { border-collapse: collapse; margin: 2px 0 6px; }
.trainparity-result th, .trainparity-result td { border: 1px solid #d0d7de; padding: 2px 8px;
  text-align: left; vertical-align: top; font-family: ui-monospace, monospace; font-size: 12px; }
.trainparity-result th { background: #f6f8fa; }
.trainparity-result .tp-message { font-weight: 600; }
.trainparity-result .tp-diagnosis { background: #fff8c5; border-left: 4px solid #9a6700;
  padding: 2px 10px 6px; margin: 8px 0; }
.trainparity-result .tp-diagnosis th, .trainparity-result .tp-diagnosis td { border: 0;
  background: transparent; font-family: system-ui, sans-serif; font-size: 13px; }
.trainparity-result .tp-detail { font-size: 12px; background: #f6f8fa; padding: 6px 8px;
  white-space: pre-wrap; margin: 6px 0; }
"""


def html_fragment(
    report: Mapping[str, Any], *, max_rows: int = 20, include_environment: bool = False
) -> str:
    """A self-contained HTML block (inline style, no scripts): badge, message, section tables."""
    outcome = report.get("outcome")
    parts = [f"<div class='trainparity-result'><style>{_FRAGMENT_STYLE}</style>"]
    if outcome is not None:
        colour = OUTCOME_COLOURS.get(str(outcome), "#57606a")
        parts.append(
            f"<div class='tp-headline'><span class='tp-badge' id='tp-outcome' "
            f"style='background:{colour}'>{_escape(outcome)}</span>"
            f"<span class='tp-message'>{_escape(headline(report).partition(': ')[2])}</span></div>"
        )
    else:
        parts.append(f"<div class='tp-headline tp-message'>{_escape(headline(report))}</div>")
    detail, newline = message_detail(report), "\n"
    if detail:
        parts.append(f"<pre class='tp-detail'>{_escape(newline.join(detail))}</pre>")
    drift = drift_points(report)
    noise = _noise_block(report)
    for section in report_sections(
        report, max_rows=max_rows, include_environment=include_environment
    ):
        # The curve right after the diagnosis (or first, when there is none): it shows
        # where the runs part and how fast they drift before any table is read.
        if drift and section.title != "Diagnosis":
            parts.append(_drift_figure(report, drift))
            drift = ()
        # The envelope right after the summary: the verdict was judged against it, so it
        # comes before the tables of what differed.
        if noise and section.title not in ("Diagnosis", "Summary"):
            parts.append(noise)
            noise = ""
        parts.append(html_section(section))
        if section.title == "First divergence" and "error_growth" in report:
            parts.append(error_growth_svg(report))
    if noise:  # no section came after the summary
        parts.append(noise)
    if "error_growth" in report and not isinstance(report.get("first_divergence"), Mapping):
        parts.append(error_growth_svg(report))
    parts.append("</div>")
    return "".join(parts)


def _noise_block(report: Mapping[str, Any]) -> str:
    """The noise envelope's table and figure, or "" when the check was not judged against noise."""
    section = noise_envelope_section(report)
    envelope = noise_envelope(report)
    if section is None or envelope is None:
        return ""
    table = html_section(section)
    points = envelope_points(envelope)
    if not points:  # nothing was judged step by step: the table says all there is
        return table
    factor = envelope.get("factor")
    figure = noise_envelope_svg(
        points,
        float(factor) if isinstance(factor, (int, float)) else math.nan,
        exit_step_of(report),
    )
    # The figure inside the section, so the section's slug covers both.
    return table.removesuffix("</section>") + figure + "</section>"


def _drift_figure(report: Mapping[str, Any], drift: Sequence[Mapping[str, Any]]) -> str:
    """The drift curve under a title that says which runs it compares, when the report says."""
    first = (report.get("trajectory") or {}).get("first_divergence") or {}
    pair = (
        f" of {first['candidate_phase']} against {first['baseline_phase']}"
        if first.get("candidate_phase")
        else ""
    )
    title = f"Drift{pair}: relative RMS error per step (dashed: first divergent step)"
    svg = drift_svg(list(drift), report.get("first_divergent_step"))
    return f"<section class='tp-drift-plot'><h3>{_escape(title)}</h3>{svg}</section>"


def html_section(section: Section) -> str:
    slug = "tp-" + section.title.lower().split(" (")[0].replace(" ", "-")
    lines = [f"<section class='{slug}'><h3>{_escape(section.title)}</h3><table>"]
    if section.columns:
        lines.append("<tr>" + "".join(f"<th>{_escape(c)}</th>" for c in section.columns) + "</tr>")
        for row in section.rows:
            lines.append("<tr>" + "".join(f"<td>{_escape(cell)}</td>" for cell in row) + "</tr>")
    else:
        for key, value in section.rows:
            lines.append(f"<tr><th>{_escape(key)}</th><td>{_escape(value)}</td></tr>")
    lines.append("</table></section>")
    return "".join(lines)


def _escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


def result_html(result: Any) -> str:
    """`_repr_html_` for result objects: the HTML fragment of `result.to_dict()`."""
    return html_fragment(result.to_dict())
