"""Two recordings compared step by step: which step parts them first, where, and by how much."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.comparison.policies import (
    MISSING,
    ComparisonPolicy,
    Difference,
    ExactComparison,
    collect_differences,
)
from trainparity._internal.comparison.windows import ValueWindow, value_window
from trainparity._internal.recording.reader import RecordedStep, Recording, tensor_at
from trainparity._internal.state.paths import component_of, path_under


@dataclass(frozen=True)
class StepComparison:
    """The differences of two aligned records, and each differing tensor's relative RMS error.

    `relative_rms_errors[path]` is ‖a−b‖₂/‖a‖₂ where both steps stored values
    (`exact_errors` True for the path), else the lower bound |‖a‖₂−‖b‖₂|/‖a‖₂
    from the two summaries (the triangle inequality).
    """

    step: int
    differences: tuple[Difference, ...]
    relative_rms_errors: dict[str, float] = field(default_factory=dict)
    error_bounds: dict[str, str] = field(default_factory=dict)  # path -> "exact" | "lower_bound"
    value_windows: tuple[ValueWindow, ...] = ()  # around each differing tensor's first element


@dataclass(frozen=True)
class StepDivergence:
    """The first aligned pair of records that differ."""

    step: int  # the baseline's step at that position
    rank: int
    baseline_phase: str
    candidate_phase: str
    candidate_step: int | None
    round_trip: bool  # the resumed process's first record, taken right after loading
    comparison: StepComparison

    @property
    def differences(self) -> tuple[Difference, ...]:
        return self.comparison.differences

    def with_rank_in_paths(self) -> StepDivergence:
        """The same divergence with every path under `rank{R}` (`rank1.rng.torch`).

        For recordings of several ranks, whose states share their paths: a
        verdict that says `rng.torch` would not say whose.
        """
        key = f"rank{self.rank}"
        comparison = self.comparison
        named = StepComparison(
            comparison.step,
            tuple(
                dataclasses.replace(difference, path=path_under(key, difference.path))
                for difference in comparison.differences
            ),
            {
                path_under(key, path): error
                for path, error in comparison.relative_rms_errors.items()
            },
            {path_under(key, path): bound for path, bound in comparison.error_bounds.items()},
            tuple(
                dataclasses.replace(window, path=path_under(key, window.path))
                for window in comparison.value_windows
            ),
        )
        return dataclasses.replace(self, comparison=named)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "rank": self.rank,
            "baseline_phase": self.baseline_phase,
            "candidate_phase": self.candidate_phase,
            "candidate_step": self.candidate_step,
            "round_trip": self.round_trip,
            "paths": [difference.path for difference in self.differences],
            "relative_rms_errors": dict(self.comparison.relative_rms_errors),
            "error_bounds": dict(self.comparison.error_bounds),
        }


def compare_records(
    policy: ComparisonPolicy, baseline: RecordedStep | None, candidate: RecordedStep | None
) -> StepComparison:
    """Every difference of two aligned records (the claimed step is compared as the field `step`)."""
    if baseline is None or candidate is None:
        present = baseline if baseline is not None else candidate
        reason = "missing_candidate" if candidate is None else "missing_baseline"
        left = repr(baseline.step) if baseline is not None else MISSING
        right = repr(candidate.step) if candidate is not None else MISSING
        return StepComparison(present.step, (Difference("step", reason, left, right),))
    errors: dict[str, float] = {}
    bounds: dict[str, str] = {}
    windows: list[ValueWindow] = []

    def on_tensor(record: Any) -> None:
        if record.values.equal:
            return
        window = value_window(record)
        if window is not None:
            windows.append(window)
        if record.values.relative_rms_error is not None:
            errors[record.path] = record.values.relative_rms_error
            bounds[record.path] = "exact"
            return
        left = baseline.summaries.get(record.path)
        right = candidate.summaries.get(record.path)
        if left is not None and right is not None:
            errors[record.path] = _norm_bound(left.l2_norm, right.l2_norm)
            bounds[record.path] = "lower_bound"

    differences = collect_differences(
        policy, baseline.snapshot(), candidate.snapshot(), on_tensor=on_tensor
    )
    for difference in differences:
        if difference.reason == "tensor_dtype":  # e.g. a float32 run against a float64 run
            error = _cross_dtype_error(baseline, candidate, difference.path)
            if error is not None:
                errors[difference.path] = error
                bounds[difference.path] = "exact"
    return StepComparison(baseline.step, differences, errors, bounds, tuple(windows))


def _cross_dtype_error(baseline: RecordedStep, candidate: RecordedStep, path: str) -> float | None:
    """Relative RMS error of two same-shaped floating tensors of different dtypes, in float64."""
    left, right = tensor_at(baseline.state, path), tensor_at(candidate.state, path)
    if left is None or right is None or left.data is None or right.data is None:
        return None
    if left.shape != right.shape:
        return None
    first, second = left.to_tensor(), right.to_tensor()
    if not (first.is_floating_point() and second.is_floating_point()):
        return None
    first, second = first.double(), second.double()
    norm = float(first.norm())
    gap = float((first - second).norm())
    if gap == 0.0:
        return 0.0
    return gap / norm if norm > 0 else math.inf


def _norm_bound(baseline_norm: float, candidate_norm: float) -> float:
    gap = abs(baseline_norm - candidate_norm)
    if gap == 0.0:
        return 0.0
    return gap / baseline_norm if baseline_norm > 0 else math.inf


def first_divergence(
    policy: ComparisonPolicy,
    pairs: Iterable[tuple[RecordedStep | None, RecordedStep | None, bool]],
    *,
    rank: int,
    baseline_phase: str,
    candidate_phase: str,
) -> StepDivergence | None:
    """The first of the aligned (baseline, candidate, round_trip) pairs that differ, or None."""
    for baseline, candidate, round_trip in pairs:
        comparison = compare_records(policy, baseline, candidate)
        if comparison.differences:
            return StepDivergence(
                step=baseline.step if baseline is not None else comparison.step,
                rank=rank,
                baseline_phase=baseline_phase,
                candidate_phase=candidate_phase,
                candidate_step=candidate.step if candidate is not None else None,
                round_trip=round_trip,
                comparison=comparison,
            )
    return None


def drift_point(step: int, baseline: RecordedStep, errors: dict[str, float]) -> dict[str, Any]:
    """One step of a drift curve: each component's largest relative RMS error, and their maximum."""
    components = {component_of(name): 0.0 for name in baseline.summaries}
    for path, error in errors.items():
        component = component_of(path)
        components[component] = max(components.get(component, 0.0), error)
    return {
        "step": step,
        "max_relative_rms_error": max(components.values(), default=0.0),
        "components": dict(sorted(components.items())),
    }


def drift_curve(
    pairs: Iterable[tuple[RecordedStep | None, RecordedStep | None, bool]],
) -> tuple[dict[str, Any], ...]:
    """The drift point of every aligned pair recorded on both sides (bitwise: any difference shows)."""
    exact = ExactComparison()
    return tuple(
        drift_point(
            baseline.step, baseline, compare_records(exact, baseline, candidate).relative_rms_errors
        )
        for baseline, candidate, _ in pairs
        if baseline is not None and candidate is not None
    )


def recorded_steps(recordings: dict[int, Recording], *, several_ranks: bool) -> Any:
    """A phase's recorded steps: one list for one rank, else `{"rank<R>": [...]}` per rank."""
    if not several_ranks:
        (recording,) = recordings.values()
        return [step.step for step in recording.steps]
    return {
        f"rank{rank}": [step.step for step in recordings[rank].steps] for rank in sorted(recordings)
    }


def rank_named(found: list[StepDivergence | None], rank_count: int) -> list[StepDivergence | None]:
    """Each rank's divergence with its paths under `rank{R}`, when there are several ranks."""
    if rank_count < 2:
        return found
    return [None if divergence is None else divergence.with_rank_in_paths() for divergence in found]
