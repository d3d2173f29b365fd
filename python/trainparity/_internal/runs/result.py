"""The result of `check_runs` and its per-variant comparisons."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.comparison.windows import ValueWindow
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_result import PhaseCheckResult

__all__ = ["RunsResult", "VariantComparison"]


@dataclass(frozen=True)
class VariantComparison:
    """One comparison check_runs made: a variant's two runs (`variant == reference`), or a variant against the reference."""

    variant: str
    reference: str
    outcome: Outcome
    difference_count: int
    first_path: str | None = None
    max_abs_error: float | None = None


@dataclass(frozen=True, repr=False)
class RunsResult(PhaseCheckResult):
    """The verdict of `check_runs`: do all variants of a run end in the same observed state?"""

    variants: tuple[str, ...] = ()
    reference_variant: str | None = None
    divergent_variant: str | None = None
    variant_comparisons: tuple[VariantComparison, ...] = ()
    variant_environment_keys: dict[str, tuple[str, ...]] | None = None
    # The elements around each differing tensor's first differing element at the step the
    # verdict names (comparison/windows.py), which reports preview instead of its first four.
    value_windows: tuple[ValueWindow, ...] = field(
        default=(), metadata={"omitted_when_empty": True}
    )
    # Each variant's arguments, so that a report alone reruns it (`trainparity explain
    # REPORT.json`); its environment's values stay out of reports (names only, above).
    variant_args: dict[str, tuple[str, ...]] | None = None
    # The variants as declared (arguments and environment), for explain(result) to rerun
    # them as the check ran them. Not a report key.
    declared_variants: dict[str, Any] | None = field(
        default=None, compare=False, metadata={"reported": False}
    )

    def to_dict(self) -> dict[str, Any]:
        report = super().to_dict()
        for comparison in report["variant_comparisons"]:
            comparison["outcome"] = str(Outcome(comparison["outcome"]).value)
        return report
