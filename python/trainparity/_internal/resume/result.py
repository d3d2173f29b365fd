"""The result of `check_resume`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.comparison.windows import ValueWindow
from trainparity._internal.processes.check_result import PhaseCheckResult
from trainparity._internal.why.environment_leads import EnvironmentLead
from trainparity._internal.why.likely_cause import LikelyCause

__all__ = ["ProcessResumeResult"]


@dataclass(frozen=True, repr=False)
class ProcessResumeResult(PhaseCheckResult):
    """The verdict of `check_resume` (docs/compatibility.md, "check_resume"), plus hints when baselines disagree."""

    # Whether the candidate's phases (save/exit, then load/resume) ran as distinct processes:
    # None while they have not all run (nothing was shown either way), False only when
    # their process IDs repeat (docs/compatibility.md; the contract's default is False).
    fresh_resume_processes_distinct: bool | None = None
    # The elements around each differing tensor's first differing element, at the step the
    # verdict names: what a report previews (a summary shows a tensor's first elements only).
    value_windows: tuple[ValueWindow, ...] = ()
    # FAIL only, when many paths differ and one of them is a value that training does not
    # change (why/likely_cause.py): the one that explains the others, which the
    # reports name before the first path in traversal order.
    likely_cause: LikelyCause | None = field(default=None, metadata={"omitted_when_none": True})
    # `trainparity judge` only: how the machines that ran baseline_a and candidate_resume
    # differ (the plan's scripts record their fingerprints). A check that ran its phases
    # itself has no such key in its report.
    environment_leads: tuple[EnvironmentLead, ...] | None = field(
        default=None, metadata={"omitted_when_none": True}
    )
    # A chain of resumes or an elastic resume (resume/chain.py): each candidate phase's
    # steps and rank count. Absent from the report of one split at the case's rank count.
    resume_chain: tuple[dict[str, Any], ...] | None = field(
        default=None, metadata={"omitted_when_none": True}
    )
