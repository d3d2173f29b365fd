"""A report as terminal text, and results as one-line reprs.

The headline (`OUTCOME: message`) and the message's detail lines are shared
with the HTML views; the text report lays each section out as aligned columns.
Every string goes through `printable`, so recorded text cannot forge a line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainparity._internal.reports.sections.cells import Section
from trainparity._internal.reports.sections.noise import noise_summary_lines
from trainparity._internal.reports.sections.report import report_sections
from trainparity._internal.reports.terminal_text import printable

__all__ = ["headline", "message_detail", "result_repr", "text_report"]


def headline(report: Mapping[str, Any]) -> str:
    """`OUTCOME: message` (its first line), or the report's kind when it has no outcome."""
    outcome = report.get("outcome")
    if outcome is None:
        return "trainparity environment" if "environment" in report else "trainparity report"
    return f"{outcome}: {_message_lines(report)[0]}"


def message_detail(report: Mapping[str, Any]) -> list[str]:
    """The message's lines after its first: a failed child's last stderr lines, where its log is."""
    return _message_lines(report)[1:]


def _message_lines(report: Mapping[str, Any]) -> list[str]:
    return str(report.get("message", "")).split("\n")


def text_report(
    report: Mapping[str, Any], *, max_rows: int = 10, include_environment: bool = False
) -> str:
    """The report as terminal text: headline, then each section as aligned columns.

    Every headline and cell goes through `printable`, so a recorded key or path
    holding a newline or an escape sequence cannot forge or restyle a line.
    """
    lines = [printable(headline(report))]
    # Quoted with "| ": the detail holds the user's text (paths, a child's stderr), and a
    # newline in it must not start a line that reads like a verdict.
    lines.extend("  | " + printable(line) for line in message_detail(report))
    # Under NoiseComparison a verdict is only as strong as the envelope: what size of fault
    # could have been seen, and (on PASS) how close the candidate came, belong beside it.
    lines.extend("  " + printable(line) for line in noise_summary_lines(report))
    for section in report_sections(
        report, max_rows=max_rows, include_environment=include_environment
    ):
        lines.append("")
        lines.append(printable(section.title))
        lines.extend("  " + line for line in _text_rows(section))
    return "\n".join(lines) + "\n"


def _text_rows(section: Section) -> list[str]:
    # Escaped before measuring, so the columns line up with what is printed.
    rows = [
        tuple(printable(cell) for cell in row)
        for row in ([section.columns, *section.rows] if section.columns else section.rows)
    ]
    widths = [max(len(row[index]) for row in rows) for index in range(len(rows[0]))]
    # The last column is not padded, so long values do not leave trailing blanks.
    return [
        "  ".join(
            cell.ljust(width) if index < len(row) - 1 else cell
            for index, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]


def result_repr(result: Any) -> str:
    """A one-line repr for a result object: class, outcome, message, first divergence, count."""
    parts = [f"outcome={result.outcome}", f"message={result.message!r}"]
    first = getattr(result, "primary_difference", None)
    if first is not None:
        parts.append(f"first_divergence={first.path!r} ({first.reason})")
    violation = getattr(result, "first_violation", None)
    if violation is not None:
        parts.append(f"first_violation={violation.path!r} ({violation.kind})")
    differences = getattr(result, "all_differences", None)
    if differences:
        parts.append(f"differences={len(differences)}")
    return printable(f"{type(result).__name__}({', '.join(parts)})")
