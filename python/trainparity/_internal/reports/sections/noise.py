"""The noise envelope of a check judged under NoiseComparison, for every human view.

A report's `noise_envelope` holds the declared relation, per step the noise of
the samples, the candidate's excursion and the limit, the closest approach and
the sensitivity; this module words them as the lines under a text verdict, as
the rows of the HTML section, and as the per-step points its figure draws.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainparity._internal.reports.sections.cells import Section, number_cell, text_cell

__all__ = [
    "EnvelopePoint",
    "envelope_points",
    "exit_step_of",
    "noise_envelope",
    "noise_envelope_section",
    "noise_summary_lines",
]


@dataclass(frozen=True)
class EnvelopePoint:
    """One step of the figure: the samples' noise and limit, each candidate's excursion.

    Each value is the largest over the step's components (and ranks): one curve
    per quantity, while the verdict itself is per path.
    """

    step: int
    noise: float
    limit: float
    excursions: tuple[tuple[str, float], ...]  # (candidate, excursion), sorted by candidate


def noise_envelope(report: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The report's `noise_envelope`, or None when the check was not judged against noise."""
    envelope = report.get("noise_envelope")
    return envelope if isinstance(envelope, Mapping) else None


def noise_summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The lines a text report shows under its verdict: the sensitivity, and for PASS the closest approach.

    Empty without a noise envelope: a report judged exactly or by tolerance has no envelope to show.
    """
    envelope = noise_envelope(report)
    if envelope is None:
        return []
    lines = []
    if envelope.get("sensitivity"):
        lines.append(f"sensitivity: {envelope['sensitivity']}")
    if report.get("outcome") == "PASS":
        lines.append(f"closest approach: {_approach_text(envelope)}")
    return lines


def noise_envelope_section(report: Mapping[str, Any]) -> Section | None:
    """The declared relation, what the noise was measured from, the sensitivity and the approach."""
    envelope = noise_envelope(report)
    if envelope is None:
        return None
    factor = number_cell(envelope.get("factor"))
    rows = [
        (
            "declared relation",
            f"excursion ≤ {factor} × noise + floor, per floating-point path (relative L2); "
            "every other path exact",
        ),
        ("factor", factor),
        ("baselines", text_cell(envelope.get("baselines"))),
        (
            "floor",
            f"rtol={number_cell(envelope.get('floor_rtol'))}, "
            f"atol={number_cell(envelope.get('floor_atol'))}",
        ),
        (
            "max noise",
            "none (no limit)"
            if envelope.get("max_noise") is None
            else number_cell(envelope["max_noise"]),
        ),
    ]
    if envelope.get("judged_on") is not None:
        rows.append(("judged on", str(envelope["judged_on"])))
    if envelope.get("samples"):
        rows.append(("noise measured from", text_cell(list(envelope["samples"]))))
    if envelope.get("noise_pair"):
        rows.append(("noise pair", text_cell(list(envelope["noise_pair"]))))
    if envelope.get("sensitivity"):
        rows.append(("sensitivity", str(envelope["sensitivity"])))
    # On a PASS the largest ratio is how close the candidate came to the limit; on any
    # other verdict it is how far it went, so the row is not called an approach there.
    label = "closest approach" if report.get("outcome") == "PASS" else "largest excursion / noise"
    rows.append((label, _approach_text(envelope, detail=True)))
    exit_step = exit_step_of(report)
    if exit_step is not None:
        rows.append(("first exit", f"step {exit_step}"))
    return Section("Noise envelope", tuple(rows))


def exit_step_of(report: Mapping[str, Any]) -> int | None:
    """The step where the candidate left the envelope: a FAIL's first divergent step, else None."""
    if report.get("outcome") != "FAIL":
        return None
    step = report.get("first_divergent_step")
    return step if isinstance(step, int) else None


def envelope_points(envelope: Mapping[str, Any]) -> tuple[EnvelopePoint, ...]:
    """The envelope's rows folded into one point per step, in step order.

    Rows of the samples alone (candidate None, before the split) give noise and
    limit only; a candidate row without excursions measured nothing and adds no
    point, rather than a 0 that would read as "bit for bit".
    """
    noise: dict[int, float] = {}
    limit: dict[int, float] = {}
    excursions: dict[int, dict[str, float]] = {}
    for row in envelope.get("steps") or ():
        step = int(row["step"])
        noise[step] = max(noise.get(step, 0.0), _largest(row.get("noise")))
        limit[step] = max(limit.get(step, 0.0), _largest(row.get("limit")))
        candidate = row.get("candidate")
        if candidate is not None and row.get("excursion"):
            per_step = excursions.setdefault(step, {})
            per_step[str(candidate)] = max(
                per_step.get(str(candidate), 0.0), _largest(row["excursion"])
            )
    return tuple(
        EnvelopePoint(
            step, noise[step], limit[step], tuple(sorted(excursions.get(step, {}).items()))
        )
        for step in sorted(noise)
    )


def _largest(values: Mapping[str, float] | None) -> float:
    """The largest value over components; NaN is left out (it has no place on the axis)."""
    present = [float(value) for value in (values or {}).values() if not math.isnan(value)]
    return max(present, default=0.0)


def _approach_text(envelope: Mapping[str, Any], *, detail: bool = False) -> str:
    closest = envelope.get("closest_approach")
    if not isinstance(closest, Mapping):
        return "none: every judged value matched the samples bit for bit"
    text = f"{_ratio(closest.get('ratio'))}× the noise at step {closest.get('step')}, {closest.get('path')}"
    # The candidate is named only where there is more than one, so a resume's line stays short.
    candidates = {row.get("candidate") for row in envelope.get("steps") or ()} - {None}
    if len(candidates) > 1 and closest.get("candidate") is not None:
        text += f" ({closest['candidate']})"
    if detail:
        text += (
            f" (excursion {number_cell(closest.get('excursion'))}, "
            f"noise {number_cell(closest.get('noise'))})"
        )
    return text


def _ratio(value: Any) -> str:
    if not isinstance(value, (int, float)):
        return "n/a"
    return "inf" if math.isinf(value) else f"{value:.3g}"
