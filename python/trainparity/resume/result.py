"""The result of `check_resume`."""

from __future__ import annotations

from dataclasses import dataclass

from trainparity.comparison.windows import ValueWindow
from trainparity.processes.check_result import PhaseCheckResult

__all__ = ["ProcessResumeResult"]


@dataclass(frozen=True, repr=False)
class ProcessResumeResult(PhaseCheckResult):
    """The verdict of `check_resume` (CONTRACT §6.11), plus hints when baselines disagree."""

    fresh_resume_processes_distinct: bool = False
    # The elements around each differing tensor's first differing element, at the step the
    # verdict names: what a report previews (a summary shows a tensor's first elements only).
    value_windows: tuple[ValueWindow, ...] = ()
