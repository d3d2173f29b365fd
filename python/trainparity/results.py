"""Result records of the checks and their machine-report dictionaries."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from trainparity.comparison import Difference
from trainparity.display import result_html, result_repr
from trainparity.distributed.rank_processes import RankProcessEvidence
from trainparity.outcomes import Outcome
from trainparity.version import add_report_metadata

__all__ = ["AccumulationResult", "ExternalProcessEvidence", "ProcessResumeResult", "report_dict"]


@dataclass(frozen=True)
class ExternalProcessEvidence:
    """One training child that ran to exit: which phase, its PID, time, exit status and resources."""

    phase: str
    pid: int
    elapsed_seconds: float
    returncode: int
    signal: int | None = None
    user_seconds: float = 0.0
    system_seconds: float = 0.0
    peak_rss_bytes: int = 0
    ranks: tuple[RankProcessEvidence, ...] = ()  # a torchrun phase's ranks, sampled from /proc


@dataclass(frozen=True)
class ProcessResumeResult:
    """The verdict of `check_resume` (CONTRACT §6.11), plus hints when baselines disagree."""

    outcome: Outcome
    message: str
    case: str
    first_divergent_step: int | None = None
    primary_difference: Difference | None = None
    all_differences: tuple[Difference, ...] = ()
    processes: tuple[ExternalProcessEvidence, ...] = ()
    fresh_resume_processes_distinct: bool = False
    propagated_environment_keys: tuple[str, ...] = ()
    timing_seconds: dict[str, float] | None = None
    snapshot_ipc_bytes: int = 0
    checkpoint_max_bytes: int = 0
    comparison_policy: str = "exact"
    comparison_rtol: float | None = None
    comparison_atol: float | None = None
    comparison_equal_nan: bool | None = None
    nondeterminism_hints: tuple[str, ...] = ()
    environment: dict[str, Any] | None = None
    # Only when the case's processes call record() (docs/trajectories.md):
    trajectory: dict[str, Any] | None = None
    final_state_differences: tuple[Difference, ...] | None = None

    __repr__ = result_repr
    _repr_html_ = result_html

    def to_dict(self) -> dict[str, Any]:
        return report_dict(self)


@dataclass(frozen=True)
class AccumulationResult:
    """The verdict of `check_accumulation` (CONTRACT §7.10)."""

    outcome: Outcome
    message: str
    case: str
    equivalence: str
    first_observed_phase: str | None = None
    primary_difference: Difference | None = None
    all_differences: tuple[Difference, ...] = ()
    process_ids: tuple[int, ...] = ()
    verified_equal_initial_state: bool = False
    loss_normalization_captured: bool = False
    comparison_policy: str = "exact"
    peak_temporary_directory_bytes: int = 0
    persisted_artifact_bytes: int = 0
    environment: dict[str, Any] | None = (
        None  # fingerprint incl. the children's allow-listed variables
    )

    __repr__ = result_repr
    _repr_html_ = result_html

    def to_dict(self) -> dict[str, Any]:
        return report_dict(self)


def report_dict(result: Any) -> dict[str, Any]:
    """`{"schema_version", "trainparity_version", **fields}` with outcome as its string value.

    Like dataclasses.asdict: nested dataclasses become dicts, tuples stay tuples
    (they become JSON arrays when serialised).
    """
    fields = dataclasses.asdict(result)
    fields["outcome"] = str(Outcome(fields["outcome"]).value)
    return add_report_metadata(fields)
