"""A report cut into its sections, and the sections that every report shares.

`report_sections` runs every section builder over a report dictionary (a
result's `to_dict()`) and keeps those that apply, so one code path serves every
check, snapshot diffs and the environment report. The sections not tied to one
kind of report live here: diagnosis, summary, environment leads, hints and the
environment itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainparity._internal.reports.diagnosis import diagnosis_rows
from trainparity._internal.reports.sections.cells import Section, text_cell
from trainparity._internal.reports.sections.coverage import (
    anomalies_section,
    coverage_counts_section,
    epochs_section,
    first_violation_section,
)
from trainparity._internal.reports.sections.crashes import crash_points_section
from trainparity._internal.reports.sections.differences import (
    differences_section,
    drift_section,
    first_divergence_section,
    variant_comparisons_section,
    worst_tensors_section,
)
from trainparity._internal.reports.sections.ops import (
    first_divergent_op_section,
    one_side_ops_section,
)
from trainparity._internal.reports.sections.phases import phases_section, timings_section
from trainparity._internal.reports.sections.why import first_op_section, leads_section

__all__ = ["report_sections"]

# Report keys shown as context under the headline, in this order.
_CONTEXT_KEYS = (
    ("case", "case"),
    ("command_interpreter", "command interpreter"),
    ("command_cwd", "command cwd"),
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
    ("checkpoint_location", "checkpoint location"),
    ("first_failing_point", "first failing crash point"),
    ("points_found", "crash points found"),
    ("points_run", "crash points run"),
    ("crash_runs", "runs killed at a point"),
    ("distinct_images", "distinct disk images"),
    ("restarts", "restarts"),
    ("max_steps_redone", "most steps redone"),
)


def report_sections(
    report: Mapping[str, Any], *, max_rows: int = 10, include_environment: bool = False
) -> list[Section]:
    """The report's content as sections, most important first; tables keep `max_rows` rows."""
    builders = (
        _diagnosis,
        _context,
        first_op_section,
        leads_section,
        first_divergence_section,
        crash_points_section,
        differences_section,
        first_divergent_op_section,
        epochs_section,
        first_violation_section,
        coverage_counts_section,
        variant_comparisons_section,
        phases_section,
        timings_section,
        worst_tensors_section,
        drift_section,
        one_side_ops_section,
        _environment_leads,
        anomalies_section,
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
        (label, text_cell(report[key]))
        for key, label in _CONTEXT_KEYS
        if report.get(key) is not None
    ]
    rows += _warm_start_rows(report)
    if "comparison_policy" in report:
        rows.append(("comparison", _policy_text(report)))
    if "all_differences" in report:
        rows.append(("differences", _count_text(report)))
    if report.get("process_ids"):
        rows.append(("process IDs", ", ".join(str(pid) for pid in report["process_ids"])))
    return Section("Summary", tuple(rows)) if rows else None


def _warm_start_rows(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Why no phase shared a warm server (processes/warm/starter.py), when none could."""
    environment = report.get("environment")
    start = environment.get("child_start") if isinstance(environment, Mapping) else None
    if isinstance(start, Mapping) and start.get("unshared"):
        return [("warm start", str(start["unshared"]))]
    return []


def _count_text(report: Mapping[str, Any]) -> str:
    count = len(report["all_differences"])
    return f"{count} (listed under Differences)" if count else "0"


def _policy_text(report: Mapping[str, Any]) -> str:
    policy = str(report["comparison_policy"])
    if report.get("comparison_rtol") is None:
        return policy
    return (
        f"{policy} (rtol={report['comparison_rtol']}, atol={report['comparison_atol']}, "
        f"equal_nan={report['comparison_equal_nan']})"
    )


def _environment_leads(report: Mapping[str, Any]) -> Section | None:
    leads = report.get("environment_leads")
    if leads is None or report.get("outcome") == "ERROR":  # no environments were read
        return None
    if not leads:
        return Section("Environment leads (not causes)", (("none", "the environments match"),))
    rows = tuple(
        (
            str(lead["key"]),
            text_cell(lead["baseline"]),
            text_cell(lead["candidate"]),
            str(lead["note"]),
        )
        for lead in leads
    )
    return Section(
        "Environment leads (not causes)", rows, ("fact", "baseline", "candidate", "why it matters")
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
            yield (f"{prefix}{key}", text_cell(value))
