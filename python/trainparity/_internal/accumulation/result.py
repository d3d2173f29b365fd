"""The result of `check_accumulation`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.comparison.windows import ValueWindow
from trainparity._internal.processes.check_result import CheckResult

__all__ = ["AccumulationResult"]


@dataclass(frozen=True, repr=False)
class AccumulationResult(CheckResult):
    """The verdict of `check_accumulation` (docs/compatibility.md, "check_accumulation")."""

    equivalence: str
    first_observed_phase: str | None = None
    process_ids: tuple[int, ...] = ()
    verified_equal_initial_state: bool = False
    loss_normalization_captured: bool = False
    peak_temporary_directory_bytes: int = 0
    persisted_artifact_bytes: int = 0
    # Set when the candidate's ranks held shards (FSDP2): how it was compared, and what was not.
    compared_on: str | None = field(default=None, metadata={"omitted_when_none": True})
    # Under NoiseComparison: the declared relation and, per phase, noise, excursion and limit.
    noise_envelope: dict[str, Any] | None = field(
        default=None, metadata={"omitted_when_none": True}
    )
    # The elements around each differing tensor's first differing element (comparison/windows.py),
    # which the reports preview instead of its first four.
    value_windows: tuple[ValueWindow, ...] = field(
        default=(), metadata={"omitted_when_empty": True}
    )
