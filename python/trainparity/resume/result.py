"""The result of `check_resume`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainparity.processes.check_result import PhaseCheckResult

__all__ = ["ProcessResumeResult"]


@dataclass(frozen=True, repr=False)
class ProcessResumeResult(PhaseCheckResult):
    """The verdict of `check_resume` (CONTRACT §6.11), plus hints when baselines disagree."""

    fresh_resume_processes_distinct: bool = False
    # A chain of resumes or an elastic resume (resume/chain.py): each candidate phase's
    # steps and rank count. Absent from the report of one split at the case's rank count.
    resume_chain: tuple[dict[str, Any], ...] | None = field(
        default=None, metadata={"reported": "unless None"}
    )
