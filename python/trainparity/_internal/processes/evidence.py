"""What a check reports of one training child it ran: phase, PID, time, exit status, resources, job."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainparity._internal.distributed.rank_processes import RankProcessEvidence

__all__ = ["ExternalProcessEvidence", "NodeProcessEvidence"]


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
