"""Human views of results and reports: terminal text, one-line reprs, HTML fragments, notebook progress.

Every view is built from a report dictionary (a result's `to_dict()`), so one
code path serves the resume, accumulation and coverage results, snapshot
diffs and the environment report: the report is cut into titled sections
(key/value pairs or tables), which are then rendered as text or HTML.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trainparity.reports.diagnosis import diagnosis_rows
from trainparity.reports.figures import drift_svg, error_growth_svg
from trainparity.reports.terminal_text import printable

__all__ = [
    "NotebookProgress",
    "Section",
    "headline",
    "html_fragment",
    "drift_points",
    "report_sections",
    "result_html",
    "result_repr",
    "text_report",
]

OUTCOME_COLOURS = {
    "PASS": "#1a7f37",
    "FAIL": "#cf222e",
    "ABSTAIN": "#9a6700",
    "ERROR": "#6639ba",
}
_NOT_AVAILABLE = "n/a"

# Report keys shown as context under the headline, in this order.
_CONTEXT_KEYS = (
    ("case", "case"),
    ("equivalence", "equivalence"),
    ("policy", "policy"),
    ("baseline", "baseline"),
    ("candidate", "candidate"),
    ("compared_by", "compared by"),
    ("integrity", "integrity"),
    ("variants", "variants"),
    ("reference_variant", "reference variant"),
    ("divergent_variant", "divergent variant"),
    ("first_divergent_step", "first divergent step"),
    ("first_step_beyond_tolerance", "first step beyond tolerance"),
    ("first_observed_phase", "first observed phase"),
    ("verified_equal_initial_state", "verified equal initial state"),
    ("fresh_resume_processes_distinct", "fresh resume processes distinct"),
    ("compared_tensor_count", "tensors compared"),
    ("baseline_op_count", "ops in baseline"),
    ("candidate_op_count", "ops in candidate"),
    ("compared_op_count", "ops compared (in both)"),
    ("differing_op_count", "ops whose output differs"),
    ("leads_ranked_for", "leads ranked for"),
    ("median_relative_rms_error", "median relative RMS error"),
    ("max_relative_rms_error", "max relative RMS error"),
    ("evidence_path", "evidence file"),
)
# Whole-check timings first; per-step ones (already in the phase table) after them.
_TIMING_SUMMARY_KEYS = (
    "total_wall",
    "end_to_end_multiplier",
    "single_normal_run",
    "baseline_self_consistency",
    "candidate_save_exit_new_process_load_resume",
    "comparison",
    "snapshot_capture",
    "serialization",
)
_COVERAGE_COUNT_KEYS = (
    "total_observations",
    "unique_observed_ids",
    "expected_id_count",
    "missing_id_count",
    "unexpected_id_count",
    "repeated_id_count",
    "same_rank_duplicate_id_count",
    "cross_rank_overlap_id_count",
    "actual_padding_count",
    "expected_padding_count",
)


@dataclass(frozen=True)
class Section:
    """One titled block of a report view: (key, value) rows when `columns` is empty, else a table."""

    title: str
    rows: tuple[tuple[str, ...], ...]
    columns: tuple[str, ...] = ()
    # Shown whole whatever max_rows: its rows are bounded by the processes a check starts.
    whole: bool = False


# Building sections from a report ------------------------------------------------------


def report_sections(
    report: Mapping[str, Any], *, max_rows: int = 10, include_environment: bool = False
) -> list[Section]:
    """The report's content as sections, most important first; tables keep `max_rows` rows."""
    builders = (
        _diagnosis,
        _context,
        _first_divergence,
        _differences,
        _first_divergent_op,
        _first_violation,
        _coverage_counts,
        _variant_comparisons,
        _phases,
        _timings,
        _worst_tensors,
        _drift,
        _one_side_ops,
        _environment_leads,
        _anomalies,
        _hints,
    )
    sections = [section for build in builders if (section := build(report)) is not None]
    if include_environment and isinstance(report.get("environment"), Mapping):
        sections.append(Section("Environment", tuple(_flattened(report["environment"]))))
    return [_truncated(section, max_rows) for section in sections]


def _truncated(section: Section, max_rows: int) -> Section:
    if section.whole or not section.columns or len(section.rows) <= max_rows:
        return section
    hidden = len(section.rows) - max_rows
    filler = ("",) * (len(section.columns) - 1)
    return Section(
        section.title,
        (*section.rows[:max_rows], (f"... {hidden} more", *filler)),
        section.columns,
    )


def _diagnosis(report: Mapping[str, Any]) -> Section | None:
    rows = diagnosis_rows(report)
    return Section("Diagnosis", rows) if rows else None


def _context(report: Mapping[str, Any]) -> Section | None:
    rows = [
        (label, _text(report[key])) for key, label in _CONTEXT_KEYS if report.get(key) is not None
    ]
    if "comparison_policy" in report:
        rows.append(("comparison", _policy_text(report)))
    if "all_differences" in report:
        rows.append(("differences", _count_text(report)))
    if report.get("process_ids"):
        rows.append(("process IDs", ", ".join(str(pid) for pid in report["process_ids"])))
    return Section("Summary", tuple(rows)) if rows else None


def _count_text(report: Mapping[str, Any]) -> str:
    count = len(report["all_differences"])
    return f"{count} (listed under Differences)" if count else "0"


def _differences(report: Mapping[str, Any]) -> Section | None:
    """Every difference the verdict counts, in traversal order; long lists say how many are hidden."""
    differences = report.get("all_differences") or ()
    if not differences:
        return None
    rows = tuple(
        (
            str(item["path"]),
            str(item["reason"]),
            _text(item.get("baseline")),
            _text(item.get("candidate")),
        )
        for item in differences
    )
    return Section("Differences", rows, ("path", "reason", "baseline", "candidate"))


def _policy_text(report: Mapping[str, Any]) -> str:
    policy = str(report["comparison_policy"])
    if report.get("comparison_rtol") is None:
        return policy
    return (
        f"{policy} (rtol={report['comparison_rtol']}, atol={report['comparison_atol']}, "
        f"equal_nan={report['comparison_equal_nan']})"
    )


def _first_divergence(report: Mapping[str, Any]) -> Section | None:
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
            rows.append((label, _number(first[key])))
    rows += _window_rows(report, str(first["path"]))
    return Section("First divergence", tuple(rows))


def _window_rows(report: Mapping[str, Any], path: str) -> list[tuple[str, str]]:
    """The elements around the path's first differing element, when the report holds them."""
    window = next(
        (item for item in report.get("value_windows") or () if item["path"] == path), None
    )
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


def _first_divergent_op(report: Mapping[str, Any]) -> Section | None:
    first = report.get("first_divergence")
    if not isinstance(first, Mapping):
        return None
    error = first.get("relative_error")
    bound = "" if first.get("relative_error_is_exact") else " (lower bound, from summaries)"
    rows = [
        ("op", str(first["op"])),
        ("module", str(first["module"]) or "(top level)"),
        ("phase", str(first["phase"])),
        ("call index", str(first["call_index"])),
        ("origin", str(first["origin"])),
    ]
    if first.get("inherited_from"):
        rows.append(("inherited from", str(first["inherited_from"])))
    if first.get("born_in") and first["origin"] == "inherited":
        rows.append(("born in", str(first["born_in"])))
    rows += [
        ("reason", str(first["reason"])),
        ("relative error", _number(error) + bound),
        ("baseline output", str(first["baseline_output"])),
        ("candidate output", str(first["candidate_output"])),
    ]
    return Section("First divergence", tuple(rows))


def _one_side_ops(report: Mapping[str, Any]) -> Section | None:
    rows = tuple(("baseline", str(op)) for op in report.get("only_in_baseline") or ()) + tuple(
        ("candidate", str(op)) for op in report.get("only_in_candidate") or ()
    )
    if not rows:
        return None
    return Section("Ops in one trace only (skipped)", rows, ("only in", "op"))


def _first_violation(report: Mapping[str, Any]) -> Section | None:
    first = report.get("first_violation")
    if not isinstance(first, Mapping):
        return None
    keys = ("kind", "path", "sample_id", "rank", "worker", "epoch", "position")
    return Section(
        "First violation",
        tuple((key, _text(first.get(key))) for key in keys if key in first),
    )


def _coverage_counts(report: Mapping[str, Any]) -> Section | None:
    if report.get("outcome") not in ("PASS", "FAIL"):
        return None  # an audit that stopped early counted nothing: its zeros mean nothing
    rows = tuple(
        (key.replace("_", " "), _text(report[key]))
        for key in _COVERAGE_COUNT_KEYS
        if report.get(key) is not None
    )
    return Section("Counts", rows) if rows else None


def _variant_comparisons(report: Mapping[str, Any]) -> Section | None:
    comparisons = report.get("variant_comparisons")
    if not comparisons:
        return None
    rows = tuple(
        (
            "its two runs" if item["variant"] == item["reference"] else f"vs {item['reference']}",
            str(item["variant"]),
            str(item["outcome"]),
            str(item["difference_count"]),
            _text(item.get("first_path")),
            _number(item.get("max_abs_error")),
        )
        for item in comparisons
    )
    return Section(
        "Variants",
        rows,
        ("compared", "variant", "outcome", "differences", "first path", "max abs error"),
    )


def _phases(report: Mapping[str, Any]) -> Section | None:
    processes = report.get("processes")
    if not processes:
        return None
    rows = []
    for process in processes:
        rows.append(
            (
                str(process["phase"]),
                str(process["pid"]),
                str(process["returncode"]),
                _seconds(process.get("elapsed_seconds")),
                _seconds(process.get("user_seconds")),
                _seconds(process.get("system_seconds")),
                _mebibytes(process.get("peak_rss_bytes")),
            )
        )
        rows.extend(_rank_row(rank) for rank in process.get("ranks") or ())
    return Section(
        "Phases",
        tuple(rows),
        ("phase", "pid", "exit", "wall s", "user s", "sys s", "peak RSS MiB"),
        whole=True,
    )


def _rank_row(rank: Mapping[str, Any]) -> tuple[str, ...]:
    """A torchrun rank under its phase; '~' marks figures sampled while it ran, not measured at exit."""

    def sampled(shown: str) -> str:
        # None: measured by the agent's wait4 at the rank's exit (a warm agent's forked ranks).
        exact = "sample_interval_seconds" in rank and rank["sample_interval_seconds"] is None
        return shown if exact or shown == _NOT_AVAILABLE else f"~{shown}"

    returncode = rank.get("returncode")
    return (
        f"  rank {rank['rank']}",
        str(rank["pid"]),
        _NOT_AVAILABLE if returncode is None else str(returncode),
        "",
        sampled(_seconds(rank.get("user_seconds"))),
        sampled(_seconds(rank.get("system_seconds"))),
        sampled(_mebibytes(rank.get("peak_rss_bytes"))),
    )


def _mebibytes(value: Any) -> str:
    return f"{value / (1 << 20):.0f}" if value else _NOT_AVAILABLE


def _timings(report: Mapping[str, Any]) -> Section | None:
    timing = report.get("timing_seconds")
    if not timing:
        return None
    leading = [key for key in _TIMING_SUMMARY_KEYS if key in timing]
    rows = []
    for key in [*leading, *(key for key in timing if key not in leading)]:
        value = timing[key]
        shown = f"{value:.2f}x" if key == "end_to_end_multiplier" else _seconds(value)
        rows.append((key, shown))
    return Section("Timings", tuple(rows), ("step", "seconds"))


def _worst_tensors(report: Mapping[str, Any]) -> Section | None:
    if "differing_tensors" in report:
        rows = tuple(
            (
                str(stats["path"]),
                str(stats["dtype"]).removeprefix("torch."),
                "x".join(str(size) for size in stats["shape"]) or "scalar",
                _mismatches(stats),
                _number(stats["max_abs_error"]),
                _number(stats["max_rel_error"]),
                _number(stats["relative_rms_error"]),
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
        (str(item["path"]), _number(item["max_abs_error"]), _number(item["max_rel_error"]))
        for item in ranked
    )
    return Section("Worst tensors", rows, ("path", "max abs", "max rel"))


def drift_points(report: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    """A report's drift curve: a recording diff's `drift`, or a check's `trajectory.drift`."""
    if report.get("drift"):
        return report["drift"]
    trajectory = report.get("trajectory")
    return (trajectory.get("drift") or ()) if isinstance(trajectory, Mapping) else ()


def _drift(report: Mapping[str, Any]) -> Section | None:
    """A drift curve as a table: max relative RMS error per step and component."""
    drift = drift_points(report)
    if not drift:
        return None
    components = sorted({name for point in drift for name in point["components"]})
    first = report.get("first_divergent_step")
    rows = tuple(
        (
            f"{point['step']}{' *' if point['step'] == first else ''}",
            _number(point["max_relative_rms_error"]),
            *(_number(point["components"].get(name, 0.0)) for name in components),
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


def _environment_leads(report: Mapping[str, Any]) -> Section | None:
    leads = report.get("environment_leads")
    if leads is None or report.get("outcome") == "ERROR":  # no environments were read
        return None
    if not leads:
        return Section("Environment leads (not causes)", (("none", "the environments match"),))
    rows = tuple(
        (
            str(lead["key"]),
            _text(lead["baseline"]),
            _text(lead["candidate"]),
            str(lead["note"]),
        )
        for lead in leads
    )
    return Section(
        "Environment leads (not causes)", rows, ("fact", "baseline", "candidate", "why it matters")
    )


def _anomalies(report: Mapping[str, Any]) -> Section | None:
    examples = report.get("anomaly_examples")
    if not examples:
        return None
    rows = tuple(
        (
            str(item["kind"]),
            _text(item["sample_id"]),
            str(item["occurrence_count"]),
            _joined(item["ranks"]),
            _joined(item["workers"]),
            _joined(item["epochs"]),
        )
        for item in examples
    )
    return Section(
        "Anomaly examples", rows, ("kind", "sample ID", "seen", "ranks", "workers", "epochs")
    )


def _hints(report: Mapping[str, Any]) -> Section | None:
    hints = report.get("nondeterminism_hints")
    if not hints:
        return None
    return Section("Hints", tuple((str(hint),) for hint in hints), ("hint",))


def _flattened(tree: Mapping[str, Any], prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            yield from _flattened(value, f"{prefix}{key}.")
        else:
            yield (f"{prefix}{key}", _text(value))


# Value formatting -------------------------------------------------------------------


def _text(value: Any) -> str:
    if value is None:
        return _NOT_AVAILABLE
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(item) for item in value) if value else "(none)"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}={_text(item)}" for key, item in value.items())
    return str(value)


def _number(value: Any) -> str:
    if value is None:
        return _NOT_AVAILABLE
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return str(value)
        return f"{value:.3e}" if value and not 1e-3 <= abs(value) < 1e4 else f"{value:.6g}"
    return str(value)


def _seconds(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else _NOT_AVAILABLE


def _sortable(value: Any) -> float:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return math.inf
    return float(value)


def _joined(values: Sequence[Any]) -> str:
    return ", ".join(str(value) for value in values) if values else "-"


# Text -------------------------------------------------------------------------------


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


# HTML -------------------------------------------------------------------------------

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
    for section in report_sections(
        report, max_rows=max_rows, include_environment=include_environment
    ):
        # The curve right after the diagnosis (or first, when there is none): it shows
        # where the runs part and how fast they drift before any table is read.
        if drift and section.title != "Diagnosis":
            parts.append(_drift_figure(report, drift))
            drift = ()
        parts.append(_html_section(section))
        if section.title == "First divergence" and "error_growth" in report:
            parts.append(error_growth_svg(report))
    if "error_growth" in report and not isinstance(report.get("first_divergence"), Mapping):
        parts.append(error_growth_svg(report))
    parts.append("</div>")
    return "".join(parts)


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


def _html_section(section: Section) -> str:
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


# Notebook progress ------------------------------------------------------------------


class NotebookProgress:
    """A live per-phase table in Jupyter: `check_resume(case, progress=NotebookProgress())`.

    Each ProgressEvent updates one table in place (an IPython display handle):
    phase, state and its own time. Needs IPython; outside a notebook use
    `progress=True`, which prints lines to stderr.
    """

    def __init__(self) -> None:
        try:
            from IPython.display import HTML, display
        except ImportError as error:
            raise RuntimeError(
                "NotebookProgress needs IPython (a Jupyter kernel); use progress=True to print phase lines instead"
            ) from error
        self._html = HTML
        self._display = display
        self._handle: Any = None
        self.phases: dict[str, tuple[str, str]] = {}

    def __call__(self, event: Any) -> None:
        if event.kind == "start":
            self.phases[event.phase] = ("running", "")
        else:
            self.phases[event.phase] = ("done", _seconds(event.elapsed_seconds))
        section = Section(
            f"Progress (t+{event.since_check_start_seconds:.1f} s)",
            tuple((phase, state, seconds) for phase, (state, seconds) in self.phases.items()),
            ("phase", "state", "seconds"),
        )
        view = self._html(f"<div class='trainparity-result'>{_html_section(section)}</div>")
        if self._handle is None:
            self._handle = self._display(view, display_id=True)
        else:
            self._handle.update(view)
