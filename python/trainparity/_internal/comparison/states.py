"""In-process comparison of two training states held in memory: `compare_states`."""

from __future__ import annotations

from dataclasses import dataclass

from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    Difference,
    ExactComparison,
    TensorRecord,
    ToleranceComparison,
    collect_differences,
)
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.freeze import freeze
from trainparity._internal.state.normalize import normalize_observation
from trainparity._internal.state.snapshot import Snapshot

__all__ = ["StateComparison", "TensorStatistics", "compare_states"]


@dataclass(frozen=True)
class TensorStatistics:
    """Element-wise evidence for one tensor present on both sides with equal metadata."""

    path: str
    dtype: str
    shape: tuple[int, ...]
    numel: int
    mismatch_count: int | None
    first_mismatch_index: int | None
    max_abs_error: float | None
    max_rel_error: float | None
    relative_rms_error: float | None
    backend: str = "cpu"  # where the values were compared: "cpu", "cuda-kernel" or "host-stream"


@dataclass(frozen=True)
class StateComparison:
    """The outcome of `compare_states`: PASS or FAIL, every difference, per-tensor statistics."""

    outcome: Outcome
    first_difference: Difference | None
    differences: tuple[Difference, ...]
    tensors: tuple[TensorStatistics, ...]
    policy: str

    @property
    def equal(self) -> bool:
        return self.outcome is Outcome.PASS

    def worst_tensors(self, count: int = 10) -> tuple[TensorStatistics, ...]:
        """Differing tensors, largest relative RMS error first (ties: path order)."""
        differing = [stats for stats in self.tensors if stats.mismatch_count != 0]
        ranked = sorted(
            differing,
            key=lambda stats: (
                -(
                    stats.relative_rms_error
                    if stats.relative_rms_error is not None
                    else float("inf")
                )
            ),
        )
        return tuple(ranked[:count])


def compare_states(
    baseline: object,
    candidate: object,
    comparison: ComparisonPolicy | None = None,
) -> StateComparison:
    """Compare two in-memory states (state_dicts, nested dicts/lists of tensors and scalars).

    Mapping keys are compared as strings (optimizer state's integer indices
    become `"0"`, as in resume reports), numpy values as plain Python values.
    Tensors are compared where they live without copying when contiguous on
    the CPU. The traversal and difference reasons are those of the checks
    (docs/compatibility.md, "Comparison"); `comparison=None` means exact.
    """
    result, _ = compare_states_with_records(baseline, candidate, comparison)
    return result


def compare_states_with_records(
    baseline: object,
    candidate: object,
    comparison: ComparisonPolicy | None = None,
) -> tuple[StateComparison, list[TensorRecord]]:
    """`compare_states`, also returning each compared tensor pair (for assertion messages)."""
    policy = checked_policy(comparison)
    records: list[TensorRecord] = []
    differences = collect_differences(
        policy, _prepare(baseline), _prepare(candidate), on_tensor=records.append
    )
    result = StateComparison(
        outcome=Outcome.FAIL if differences else Outcome.PASS,
        first_difference=differences[0] if differences else None,
        differences=differences,
        tensors=tuple(_statistics(record) for record in records),
        policy=policy.name,
    )
    return result, records


def checked_policy(comparison: object, *, noise_allowed: bool = False) -> ComparisonPolicy:
    """The comparison policy a diff or check was given: exact when None, TypeError when not a policy.

    NoiseComparison needs several uninterrupted runs, so only a check that
    runs them (`noise_allowed`) takes it; a diff of two states cannot.
    """
    if comparison is None:
        return ExactComparison()
    if isinstance(comparison, (ExactComparison, ToleranceComparison)):
        return comparison
    from trainparity._internal.comparison.noise_policy import NoiseComparison

    if isinstance(comparison, NoiseComparison):
        if noise_allowed:
            return comparison  # type: ignore[return-value]
        raise TypeError(
            "NoiseComparison measures the noise of several uninterrupted runs: a diff of two "
            "states has only one pair; use it with check_resume, check_runs, "
            "check_accumulation or `trainparity diff --noise`"
        )
    raise TypeError(
        "comparison must be explicit ExactComparison or ToleranceComparison "
        "(or NoiseComparison, for a check)"
    )


def _prepare(state: object) -> object:
    if isinstance(state, Snapshot):
        return state
    return freeze(normalize_observation(state), copy=False)


def _statistics(record: TensorRecord) -> TensorStatistics:
    values = record.values
    return TensorStatistics(
        path=record.path,
        dtype=record.dtype,
        shape=record.shape,
        numel=values.numel,
        mismatch_count=values.mismatch_count,
        first_mismatch_index=values.first_mismatch_index,
        max_abs_error=values.max_abs_error,
        max_rel_error=values.max_rel_error,
        relative_rms_error=values.relative_rms_error,
        backend=values.backend,
    )
