"""The result of `check_runs` and its per-variant comparisons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trainparity.comparison import Difference
from trainparity.display import result_html, result_repr
from trainparity.outcomes import Outcome
from trainparity.results import ExternalProcessEvidence, report_dict

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


@dataclass(frozen=True)
class RunsResult:
    """The verdict of `check_runs`: do all variants of a run end in the same observed state?"""

    outcome: Outcome
    message: str
    case: str
    variants: tuple[str, ...] = ()
    reference_variant: str | None = None
    divergent_variant: str | None = None
    first_divergent_step: int | None = None
    primary_difference: Difference | None = None
    all_differences: tuple[Difference, ...] = ()
    variant_comparisons: tuple[VariantComparison, ...] = ()
    processes: tuple[ExternalProcessEvidence, ...] = ()
    propagated_environment_keys: tuple[str, ...] = ()
    variant_environment_keys: dict[str, tuple[str, ...]] | None = None
    timing_seconds: dict[str, float] | None = None
    snapshot_ipc_bytes: int = 0
    checkpoint_max_bytes: int = 0
    comparison_policy: str = "exact"
    comparison_rtol: float | None = None
    comparison_atol: float | None = None
    comparison_equal_nan: bool | None = None
    nondeterminism_hints: tuple[str, ...] = ()
    environment: dict[str, Any] | None = None
    trajectory: dict[str, Any] | None = None
    final_state_differences: tuple[Difference, ...] | None = None

    __repr__ = result_repr
    _repr_html_ = result_html

    def to_dict(self) -> dict[str, Any]:
        report = report_dict(self)
        for comparison in report["variant_comparisons"]:
            comparison["outcome"] = str(Outcome(comparison["outcome"]).value)
        return report
