"""The verdict core that check_resume, check_runs and check_accumulation results share.

With it, what a check reports of each training child it ran (`processes`):
phase, PID, time, exit status, resources, job.

Field order matters for positional construction: `outcome, message, case` stay
the first three positional fields of every result; the shared fields after them
are keyword-only, so each check's own positional fields follow the case as
before. Reports sort their keys, so the order of fields never shows there.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from trainparity._internal.comparison.policies import Difference
from trainparity._internal.distributed.rank_processes import RankProcessEvidence
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.reported import ReportedResult

__all__ = ["CheckResult", "ExternalProcessEvidence", "NodeProcessEvidence", "PhaseCheckResult"]


@dataclass(frozen=True)
class NodeProcessEvidence:
    """One torchrun agent of a multi-node phase: its node, PID, exit status and resources (wait4)."""

    node: int
    pid: int
    returncode: int
    elapsed_seconds: float
    user_seconds: float
    system_seconds: float
    peak_rss_bytes: int


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
    # The scheduler's job that ran the phase (processes/executor.py); not in a report
    # when None, so a local check's report has the keys it always had.
    job_id: str | None = field(default=None, metadata={"omitted_when_none": True})
    # A multi-node phase's agents, one per node (distributed/nodes.py); not in a report when
    # empty, as job_id.
    nodes: tuple[NodeProcessEvidence, ...] = field(
        default=(), metadata={"omitted_when_empty": True}
    )


@dataclass(frozen=True, repr=False)
class CheckResult(ReportedResult):
    """What every check answers: the outcome, why, for which case, and what differed first."""

    outcome: Outcome
    message: str
    case: str
    _: KW_ONLY
    primary_difference: Difference | None = None
    all_differences: tuple[Difference, ...] = ()
    comparison_policy: str = "exact"
    environment: dict[str, Any] | None = (
        None  # fingerprint incl. the children's allow-listed variables
    )
    # The input at fault when the check could not start because of the user's input
    # (`case`, `split_step`, ...): the command line's usage error. Not a report key.
    usage_error: str | None = field(default=None, compare=False, metadata={"reported": False})


@dataclass(frozen=True, repr=False)
class PhaseCheckResult(CheckResult):
    """A check whose phases are training runs (check_resume, check_runs): their evidence and steps."""

    _: KW_ONLY
    first_divergent_step: int | None = None
    processes: tuple[ExternalProcessEvidence, ...] = ()
    propagated_environment_keys: tuple[str, ...] = ()
    timing_seconds: dict[str, float] | None = None
    snapshot_ipc_bytes: int = 0
    checkpoint_max_bytes: int = 0
    comparison_rtol: float | None = None
    comparison_atol: float | None = None
    comparison_equal_nan: bool | None = None
    nondeterminism_hints: tuple[str, ...] = ()
    # Only when the case's processes call record() (docs/trajectories.md):
    trajectory: dict[str, Any] | None = None
    final_state_differences: tuple[Difference, ...] | None = None
    # Only under NoiseComparison (docs/resume.md): the declared relation, per step the
    # noise, excursion and limit per component, the closest approach and the sensitivity.
    noise_envelope: dict[str, Any] | None = field(
        default=None, metadata={"omitted_when_none": True}
    )
    # Only for a command template (CommandCase): what its first word runs, and why
    # (`python`: the check's interpreter), and where each phase runs (its run directory
    # under cwd="{run_dir}", else the check's cwd).
    command_interpreter: str | None = field(default=None, metadata={"omitted_when_none": True})
    command_cwd: str | None = field(default=None, metadata={"omitted_when_none": True})
    # Only for a CommandCase: its fields, so that a report alone reruns the same command
    # (`trainparity explain REPORT.json`).
    command_case: dict[str, Any] | None = field(default=None, metadata={"omitted_when_none": True})
    # The case the check was given (a spec, a class, a CommandCase), for explain(result) to
    # rerun: a class sent by value has no name to load it by. Not a report key.
    case_argument: Any = field(default=None, compare=False, metadata={"reported": False})
    # Only with reuse_baselines (processes/baseline_cache.py): per baseline phase, "reused",
    # "ran" (no entry for its key), or "ran: <why its key or entry was not trusted>".
    baselines_reused: dict[str, str] | None = field(
        default=None, metadata={"omitted_when_none": True}
    )
    # Only with explain=True on a FAIL or ABSTAIN that names a recorded step: the
    # Explanation's report (why/explanation.py): the first op and the leads tested.
    explanation: dict[str, Any] | None = field(default=None, metadata={"omitted_when_none": True})
