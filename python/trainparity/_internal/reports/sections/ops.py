"""Sections of an op-trace diff: the first divergent op, ops in one trace only.

Forensics compares two traces of the ops a training step ran; these sections
name the op where the outputs first part (and where its error came from) and
list the ops that only one trace holds, which the comparison skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainparity._internal.reports.sections.cells import Section, number_cell

__all__ = ["first_divergent_op_section", "one_side_ops_section"]


def first_divergent_op_section(report: Mapping[str, Any]) -> Section | None:
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
        ("relative error", number_cell(error) + bound),
        ("baseline output", str(first["baseline_output"])),
        ("candidate output", str(first["candidate_output"])),
    ]
    return Section("First divergence", tuple(rows))


def one_side_ops_section(report: Mapping[str, Any]) -> Section | None:
    rows = tuple(("baseline", str(op)) for op in report.get("only_in_baseline") or ()) + tuple(
        ("candidate", str(op)) for op in report.get("only_in_candidate") or ()
    )
    if not rows:
        return None
    return Section("Ops in one trace only (skipped)", rows, ("only in", "op"))
