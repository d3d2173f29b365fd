"""Small pieces both of check_runs' decision sequences share: where runs part, and how a variant compared."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from trainparity._internal.comparison.policies import Difference
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.children import PhaseError
from trainparity._internal.recording.phase_recordings import TrajectoryError
from trainparity._internal.recording.trajectory import StepDivergence
from trainparity._internal.runs.result import VariantComparison

__all__ = ["comparison_of", "recorded", "where"]


def where(step: int, differences: Sequence[Difference]) -> str:
    return f"step {step}: {differences[0].path}"


def recorded(part: Callable[[], StepDivergence | None]) -> StepDivergence | None:
    """One comparison of recordings; unusable recordings are the check's ERROR."""
    try:
        return part()
    except TrajectoryError as error:
        raise PhaseError(Outcome.ERROR, str(error)) from None


def comparison_of(
    variant: str, reference: str, differences: Sequence[Difference]
) -> VariantComparison:
    first = differences[0] if differences else None
    return VariantComparison(
        variant=variant,
        reference=reference,
        outcome=Outcome.FAIL if differences else Outcome.PASS,
        difference_count=len(differences),
        first_path=first.path if first is not None else None,
        max_abs_error=max(
            (d.max_abs_error for d in differences if d.max_abs_error is not None), default=None
        ),
    )
