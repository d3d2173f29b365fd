"""The "Why" section of an explanation (why/explain.py): the first op, then every lead and its rerun.

An explanation's report has `first_op` (the first op where the two reruns
part, born or inherited) and `leads` (knob, the two sides' values, status,
evidence). Leads that were not tested stay leads, and their status says so.
A check run with explain=True carries the same under its `explanation` key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainparity._internal.reports.sections.cells import Section

__all__ = ["first_op_section", "leads_section"]


def _explanation(report: Mapping[str, Any]) -> Mapping[str, Any]:
    nested = report.get("explanation")
    return nested if isinstance(nested, Mapping) else report


def first_op_section(report: Mapping[str, Any]) -> Section | None:
    original = report
    report = _explanation(report)
    first = report.get("first_op")
    if "leads" not in report:
        return None
    context = [
        *((("why", str(report["message"])),) if report is not original else ()),
        ("step", str(report.get("step"))),
        ("runs rerun", " and ".join(report.get("sides") or ())),
        ("reruns", str(report.get("reruns"))),
    ]
    if not isinstance(first, Mapping):
        text = report.get("trace_message") or "no op was traced"
        return Section("Why: the first op", (*context, ("first op", str(text))))
    rows = [
        *context,
        ("op", str(first.get("op"))),
        ("module", str(first.get("module") or "(top level)")),
        ("phase", str(first.get("phase"))),
        ("origin", str(first.get("origin"))),
    ]
    if first.get("inherited_from"):
        rows.append(("inherited from", str(first["inherited_from"])))
    if first.get("born_in"):
        rows.append(("born in", str(first["born_in"])))
    return Section("Why: the first op", tuple(rows))


def leads_section(report: Mapping[str, Any]) -> Section | None:
    report = _explanation(report)
    leads = report.get("leads")
    if not leads:
        return None
    rows = tuple(
        (
            str(lead["knob"]),
            str(lead["a"]),
            str(lead["b"]),
            str(lead["status"]),
            str(lead["evidence"]),
        )
        for lead in leads
    )
    return Section("Why: leads tested by rerunning", rows, ("knob", "A", "B", "status", "evidence"))
