"""The intra-op thread count of a check's children: a fair share of the usable cores, or the user's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainparity._internal.environment import usable_cores

__all__ = ["THREAD_VARIABLES", "ChildThreads", "child_threads"]

# torch sizes its intra-op pool from these (MKL_NUM_THREADS over OMP_NUM_THREADS);
# either one in the children's environment is the user's choice and is left alone.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_SET_VARIABLE = "OMP_NUM_THREADS"


@dataclass(frozen=True)
class ChildThreads:
    """The thread count every phase of one check runs with, decided once, and why.

    `count` is each child's share (None: the user's own variable is kept as it
    is). A child of several ranks (torchrun, a multi-rank accumulation
    candidate) splits its share over them, at least one thread each.
    """

    count: int | None
    reason: str
    usable_cores: int
    concurrent_children: int

    def per_rank(self, ranks: int) -> int | None:
        """Each rank's threads in a child of `ranks` ranks (None: the user's setting)."""
        return None if self.count is None else max(1, self.count // max(1, ranks))

    def environment(
        self,
        environment: Mapping[str, str],
        *,
        ranks: int = 1,
        own: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """`environment` with `own` (a phase's own variables) on top and this thread count set.

        A thread variable in `own` (a check_runs variant's env) is that phase's
        user setting and wins like the check's.
        """
        merged = {**environment, **(own or {})}
        threads = self.per_rank(ranks)
        if threads is not None and not _user_settings(own or {}):
            merged[_SET_VARIABLE] = str(threads)
        return merged

    def describe(self, ranks: int = 1, *, own: Mapping[str, str] | None = None) -> str:
        """One line for a phase's progress: its threads and why."""
        threads = self.per_rank(ranks)
        phase_settings = _user_settings(own or {})
        if phase_settings:
            return f"threads: the phase's own {phase_settings} kept"
        if threads is None:
            return f"threads: {self.reason}"
        if ranks > 1:
            return f"threads: {threads} per rank over {ranks} ranks, {self.reason}"
        return f"threads: {threads}, {self.reason}"

    def report(self) -> dict[str, Any]:
        """The report's `environment.child_threads`: keys sorted, values from this machine."""
        return {
            "concurrent_children": self.concurrent_children,
            "reason": self.reason,
            "source": "user" if self.count is None else "fair_share",
            "threads_per_child": self.count,
            "usable_cores": self.usable_cores,
        }


def child_threads(environment: Mapping[str, str], concurrent_children: int) -> ChildThreads:
    """Decide the children's thread count: the user's variable if set, else the fair share.

    The fair share is the usable cores over the children that run at once, at
    least 1: more threads than cores only spin and contend, and every phase
    gets the same count because it changes float reduction order.
    """
    cores = usable_cores()
    concurrent = max(1, concurrent_children)
    user = _user_settings(environment)
    if user:
        return ChildThreads(None, f"the user's {user} kept", cores, concurrent)
    share = max(1, cores // concurrent)
    children = "child" if concurrent == 1 else "concurrent children"
    reason = f"fair share of {cores} usable cores over {concurrent} {children}"
    return ChildThreads(share, reason, cores, concurrent)


def _user_settings(environment: Mapping[str, str]) -> str:
    """The thread variables `environment` sets, as `NAME=value, ...` ("" when none)."""
    return ", ".join(
        f"{name}={environment[name]}" for name in THREAD_VARIABLES if name in environment
    )
