"""A check's verdict in plain words: what was compared, what differs and where, what to try next."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["diagnosis_rows"]

_PHASE_ROLES = {
    "baseline_a": "the uninterrupted run",
    "baseline_b": "its repeat",
    "candidate_split": "the run interrupted at split_step",
    "candidate_resume": "the resumed run",
}
# One line per difference reason: the first thing to look at.
_NEXT_STEPS = {
    "round_trip": "save {components} in the checkpoint and load it back (load_state_dict) before training continues",
    "value": "compare how {components} is saved and restored, or advanced after loading",
    # Only where the resumed run's records show the state right after loading equal.
    "tensor_value": "{components} loads equal but training drifts: check what the checkpoint leaves out (data order, RNG, data loader position)",
    # Without such a record: whether it loaded equal is not known, so nothing is claimed.
    "tensor_value_unrecorded": "check what the checkpoint leaves out or restores wrongly for "
    "{components} (data order, RNG, data loader position); record() right after loading and "
    "after each step shows whether it loads equal and at which step it first differs",
    "missing_candidate": "the resumed run lacks {components}: save and restore it",
    "missing_baseline": "the resumed run has {components} that the uninterrupted run lacks",
    "nondeterministic": "make training deterministic (seed every RNG, deterministic algorithms, "
    "one fixed thread count) or judge the resume with NoiseComparison(), which measures the "
    "run-to-run noise of {components} and checks the resume against it (docs/resume.md)",
    "configuration": "compare how the two configurations compute {components} at that step",
}


def diagnosis_rows(report: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(label, sentence) rows for a resume report that found a divergence; () for others."""
    trajectory = report.get("trajectory")
    first = trajectory.get("first_divergence") if isinstance(trajectory, Mapping) else None
    if isinstance(first, Mapping):
        return _step_rows(first, trajectory.get("drift") or (), report)
    differences = report.get("all_differences") or ()
    is_resume = "fresh_resume_processes_distinct" in report
    if report.get("outcome") != "FAIL" or not differences or not is_resume:
        return ()
    ordered = causes_first(differences)
    paths = [str(item["path"]) for item in ordered]
    step = report.get("first_divergent_step")
    rows = [
        ("compared", _compared("baseline_a", "candidate_resume")),
        *_likely_cause_rows(report),
        (
            "finding",
            f"the final states differ at step {step}; listed first is {paths[0]}, "
            f"{_why_first(ordered[0])}, and any of them may be a downstream effect"
            f"{_first_step_hint(report)}",
        ),
        ("differing paths", listed_paths(paths)),
    ]
    rows += _likely_cause_next(report)
    # Only final states: nothing shows what the resumed run held right after loading.
    rows += _next_rows(
        [
            {**item, "reason": "tensor_value_unrecorded"}
            if item["reason"] == "tensor_value"
            else item
            for item in ordered
        ]
    )
    return tuple(rows)


def _first_step_hint(report: Mapping[str, Any]) -> str:
    """How to find the first step, or, when the script records every step, what the records show."""
    if isinstance(report.get("trajectory"), Mapping):  # record() was called: no record parted
        return " (the recorded states are equal at every recorded step)"
    return " (record() per step finds the first step)"


# A report lists at most this many paths in one row; the Differences section has them all.
_LISTED_PATHS = 12
_FLOAT_DTYPES = ("float", "bfloat", "half", "double", "complex")


def exact_state(difference: Mapping[str, Any]) -> bool:
    """Whether a difference is in exact state: a value that is not a tensor, or an integer or
    bool tensor (an RNG state, a step counter), which float drift does not change."""
    if difference.get("reason") not in ("tensor_value", "dtype", "shape"):
        return True
    summary = str(difference.get("baseline", ""))
    marker = "dtype=torch."
    if marker not in summary:
        return False
    dtype = summary.split(marker, 1)[1].split(",", 1)[0].split(")", 1)[0]
    return not dtype.startswith(_FLOAT_DTYPES)


def causes_first(differences: Any) -> list[Mapping[str, Any]]:
    """Differences with the likely causes first: exact state (settings, counters, RNG states)
    before float tensors, which drift from them; traversal order kept within each group."""
    listed = list(differences)
    return [item for item in listed if exact_state(item)] + [
        item for item in listed if not exact_state(item)
    ]


def listed_paths(paths: list[str]) -> str:
    """At most _LISTED_PATHS paths, then how many more (all under Differences)."""
    if len(paths) <= _LISTED_PATHS:
        return ", ".join(paths)
    hidden = len(paths) - _LISTED_PATHS
    return (
        ", ".join(paths[:_LISTED_PATHS])
        + f", and {hidden} more (all {len(paths)} under Differences)"
    )


def _why_first(difference: Mapping[str, Any]) -> str:
    if exact_state(difference):
        return "exact state that float drift does not change, so more likely a cause"
    return "the first in traversal order"


# Why a likely cause is likely, by its basis (likely_cause.py).
_LIKELY_BECAUSE = {
    "constant_in_records": "it is equal in every record of the uninterrupted run, so training "
    "does not change it",
    "not_a_tensor": "it is not a tensor, so more likely a setting than a result of training "
    "(record() per step would show whether it stays constant)",
    "constant_in_each_run": "each run holds it constant in every record, so it is a setting "
    "the runs compute differently, not noise",
}


def _likely_cause_rows(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The difference that explains the others (resume/result.py's `likely_cause`), if found."""
    cause = report.get("likely_cause")
    if not isinstance(cause, Mapping):
        return []
    others = len(report.get("all_differences") or ()) - 1
    because = _LIKELY_BECAUSE.get(str(cause["basis"]), str(cause["basis"]))
    follow = (
        f". The {others} other difference{'' if others == 1 else 's'} may follow from it"
        if others > 0
        else ""
    )
    return [
        (
            "likely cause",
            f"{cause['path']}: {cause['baseline']} in the baseline, {cause['candidate']} in the "
            f"candidate; {because}{follow}",
        )
    ]


def _likely_cause_next(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What to try first when a likely cause was found."""
    cause = report.get("likely_cause")
    if not isinstance(cause, Mapping):
        return []
    return [
        (
            "try next",
            f"find where {cause['path']} gets its value: the runs set it differently (e.g. from "
            "their own end step)",
        )
    ]


def _step_rows(
    first: Mapping[str, Any], drift: Any, report: Mapping[str, Any]
) -> tuple[tuple[str, str], ...]:
    paths = [str(path) for path in first.get("paths") or ()]
    components = _components(paths)
    step = first.get("step")
    baseline, candidate = str(first["baseline_phase"]), str(first["candidate_phase"])
    rows = [("compared", _compared(baseline, candidate)), *_likely_cause_rows(report)]
    if candidate == "baseline_b" and _setting(report):
        finding = (
            f"the two uninterrupted runs already differ at step {step} in {components}, by a "
            "value each holds constant: no resume verdict is possible until they agree"
        )
        reason = "setting"
    elif candidate == "baseline_b":
        finding = (
            f"the two uninterrupted runs already differ at step {step} in {components}: "
            "training is not deterministic, so no resume verdict is possible"
        )
        reason = "nondeterministic"
    elif first.get("round_trip"):
        finding = (
            f"right after loading, {components} differs from the uninterrupted run at step "
            f"{step}: the resume does not restore it"
        )
        reason = "round_trip"
    elif candidate in _PHASE_ROLES or candidate == "candidate_split":
        finding = f"{components} first differs from the uninterrupted run at step {step}"
        # After a clean load, a later difference is drift from what the checkpoint leaves out:
        # said only where the resumed run recorded its state right after loading, equal then.
        loaded = _first_record(report, candidate)
        if candidate == "candidate_split" and _setting(report):
            reason = "setting"  # the likely cause's rows say what to do
        elif candidate == "candidate_split":
            reason = "nondeterministic"  # a third uninterrupted run up to its save
        elif loaded is not None and loaded < int(step):
            reason = "tensor_value"
        else:
            reason = "tensor_value_unrecorded"
    else:  # two configurations of check_runs
        finding = f"{components} first differs between {baseline} and {candidate} at step {step}"
        reason = "configuration"
    paths = [str(item["path"]) for item in causes_first(_step_differences(paths, report))]
    rows += [("finding", finding), (f"differing at step {step}", listed_paths(paths))]
    rows += _drift_rows(drift)
    rows += _likely_cause_next(report)
    rows += _next_rows([{"path": path, "reason": reason} for path in paths])
    return tuple(rows)


def _setting(report: Mapping[str, Any]) -> bool:
    """Whether the runs part by a value each holds constant (likely_cause.py, setting_cause)."""
    cause = report.get("likely_cause")
    return isinstance(cause, Mapping) and cause.get("basis") == "constant_in_each_run"


def _first_record(report: Mapping[str, Any], phase: str) -> int | None:
    """The step of `phase`'s first record (the last rank's first, with several), or None."""
    trajectory = report.get("trajectory")
    steps = (trajectory.get("recorded_steps") or {}).get(phase) if trajectory else None
    if isinstance(steps, Mapping):
        firsts = [ranked[0] for ranked in steps.values() if ranked]
        return max(firsts) if firsts and len(firsts) == len(steps) else None
    return steps[0] if steps else None


def _step_differences(paths: list[str], report: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The step's differing paths with what the report knows of each (for their order)."""
    known = {str(item.get("path")): item for item in report.get("all_differences") or ()}
    return [known.get(path, {"path": path, "reason": "tensor_value"}) for path in paths]


def _drift_rows(drift: Any) -> tuple[tuple[str, str], ...]:
    """Where the tensors begin to differ, and how far apart they end: the drift in one line."""
    parted = [point for point in drift if point["max_relative_rms_error"] > 0]
    if not parted:
        return ()
    start, last = parted[0], drift[-1]
    components = ", ".join(name for name, error in start["components"].items() if error > 0)
    return (
        (
            "then",
            f"{components} tensors differ from step {start['step']} on; at step {last['step']} "
            f"the relative RMS error is {last['max_relative_rms_error']:.3g} (see Drift)",
        ),
    )


def _next_rows(differences: Any) -> list[tuple[str, str]]:
    by_reason: dict[str, list[str]] = {}
    for item in differences:
        by_reason.setdefault(str(item["reason"]), []).append(str(item["path"]))
    rows = []
    for reason, paths in by_reason.items():
        template = _NEXT_STEPS.get(reason)
        if template is not None:
            rows.append(("try next", template.format(components=_components(paths))))
    return rows


def _compared(baseline: str, candidate: str) -> str:
    def named(phase: str) -> str:
        role = _PHASE_ROLES.get(phase)
        return f"{phase} ({role})" if role else phase

    return f"baseline = {named(baseline)}; candidate = {named(candidate)}"


def _components(paths: list[str]) -> str:
    """The top-level components of `paths` (`scheduler` for `scheduler._last_lr[0]`), in order."""
    seen: list[str] = []
    for path in paths:
        head = path.split(".", 1)[0].split("[", 1)[0]
        if head not in seen:
            seen.append(head)
    return ", ".join(seen) if seen else "the state"
