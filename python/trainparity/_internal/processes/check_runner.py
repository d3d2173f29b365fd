"""Set-up shared by the checks that run children: their runners' options, run directory and settings."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from trainparity._internal.comparison.policies import ComparisonPolicy
from trainparity._internal.comparison.states import checked_policy
from trainparity._internal.environment import (
    environment_fingerprint,
    recorded_variables,
    usable_cores,
)
from trainparity._internal.processes.executor import PhaseExecutor
from trainparity._internal.processes.progress import ProgressCallback, ProgressReporter
from trainparity._internal.processes.run_directory import (
    children_temporary_directory,
    run_directory,
)
from trainparity._internal.processes.termination import terminating_signals_unwind
from trainparity._internal.processes.threads import ChildThreads, child_threads
from trainparity._internal.processes.warm.pool import current_shared_servers
from trainparity._internal.processes.warm.starter import ChildStarter, checked_start
from trainparity._internal.reports.machine import write_report


class _Reported(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


ResultT = TypeVar("ResultT", bound=_Reported)


@dataclass(frozen=True)
class RunSettings:
    """Where and how one check runs its children; the same for every orchestrator.

    command_dir is the children's working directory, run_root the directory
    holding each child's own directory, environment the children's complete
    environment (their thread count included), timeout the per-child limit in
    seconds. preserved is True when run_root is the user's work_dir (kept
    afterwards, so messages may point into it); parallel says whether
    independent children run at once; threads is the thread count every phase
    runs with (a child of several ranks: `threads.environment(..., ranks=n)`);
    starter starts every child (its `launch` is the groups' launcher), fresh or warm.
    """

    command_dir: Path
    run_root: Path
    temporary_dir: Path  # the children's TMPDIR (a scheduler's torchrun jobs': under run_root)
    environment: Mapping[str, str]
    timeout: float
    preserved: bool
    parallel: bool
    progress: ProgressReporter
    threads: ChildThreads
    starter: ChildStarter
    executor: PhaseExecutor | None = None  # None: the phases run here, as local children
    # The report's environment section, one dict completed in place (environment_report).
    _environment_section: dict[str, Any] = field(default_factory=dict)

    def environment_report(self) -> dict[str, Any]:
        """The report's environment section: the children's fingerprint and their thread count.

        In warm mode, `child_start` says which children were forked warm and why
        others started fresh; it fills in as they start (absent in fresh mode,
        where every child starts fresh and there is nothing to say). A warm check whose own process has
        not imported torch does not import it for this: the torch facts come
        from the first snapshot a warm child publishes (the resume observer's,
        an accumulation worker's observations), with the allow-listed
        variables of this check's children, and only a check that published
        none computes them here (complete_environment_report). Call it before
        the children start: the section is completed in place.
        """
        section = self._environment_section
        if not section:
            section["child_threads"] = self.threads.report()
            if self.starter.mode == "warm":
                section["child_start"] = self.starter.report
            if self.starter.mode == "fresh" or "torch" in sys.modules:
                self._fill_environment(environment_fingerprint(variables=self.environment))
        return section

    def observed_environment(self, fingerprint: object) -> None:
        """A fingerprint a child recorded (snapshot manifest): the section's torch facts, if none yet."""
        self.environment_report()  # the section's own entries first, whoever calls first
        if "fingerprint_version" not in self._environment_section and isinstance(fingerprint, dict):
            variables = recorded_variables(self.environment)
            self._fill_environment({**fingerprint, "variables": dict(sorted(variables.items()))})

    def complete_environment_report(self) -> None:
        """The section's fingerprint computed here when no warm child provided one."""
        if self._environment_section and "fingerprint_version" not in self._environment_section:
            self._fill_environment(environment_fingerprint(variables=self.environment))

    def _fill_environment(self, fingerprint: Mapping[str, Any]) -> None:
        section = self._environment_section
        merged = {**fingerprint, **section}
        section.clear()
        section.update(sorted(merged.items()))


def checked_timeout(timeout: object) -> float:
    """The per-child timeout in seconds; TypeError/ValueError as the contract words them."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
        raise TypeError(f"timeout must be a number of seconds, not {timeout!r}")
    if timeout <= 0:
        raise ValueError("timeout must be positive")
    return float(timeout)


def checked_parallel(parallel: object) -> bool | None:
    if parallel is not None and not isinstance(parallel, bool):
        raise TypeError(f"parallel must be None, True or False, not {parallel!r}")
    return parallel


def wants_parallel(parallel: bool | None, device: object) -> bool:
    """Independent children run at once unless asked not to, on CUDA, or on one usable core."""
    if parallel is not None:
        return parallel
    on_cuda = isinstance(device, str) and device.startswith("cuda")
    return not on_cuda and usable_cores() > 1


class CheckRunner:
    """The options every check runner takes (check_resume's, check_runs', check_accumulation's).

    Each is checked here, the same way for all three, before anything runs:
    `comparison` (None: exact), `timeout` per child, `temporary_root` for the
    run directory, `parallel` (None: decided per device), `progress`,
    `executor` (None: the training phases run as local children) and
    `start` ("fresh" or "warm"; None: $TRAINPARITY_START, else "fresh").
    """

    def __init__(
        self,
        *,
        comparison: ComparisonPolicy | None = None,
        timeout: float = 300.0,
        temporary_root: Path | None = None,
        parallel: bool | None = None,
        progress: bool | ProgressCallback | None = None,
        executor: PhaseExecutor | None = None,
        start: str | None = None,
    ) -> None:
        self.policy = checked_policy(
            comparison, noise_allowed=True
        )  # first, as the contract's accumulation tests ask
        self.timeout = checked_timeout(timeout)
        self.start = checked_start(start)
        self.parallel = checked_parallel(parallel)
        self.temporary_root = Path(temporary_root) if temporary_root is not None else None
        self.progress = ProgressReporter(progress)
        if executor is not None and not isinstance(executor, PhaseExecutor):
            raise TypeError(
                f"executor must be None or a phase executor such as "
                f"trainparity.executors.SlurmExecutor, not {type(executor).__name__}"
            )
        self.executor = executor

    @contextmanager
    def run_settings(
        self,
        *,
        work_dir: Path | None,
        prefix: str,
        command_dir: Path,
        environment: Mapping[str, str],
        device: object,
        concurrent_children: int,
    ) -> Iterator[RunSettings]:
        """One check's run directory and settings, for the duration of the block.

        The run directory is `work_dir` (kept) or a managed temporary directory
        named with `prefix` (removed); SIGTERM/SIGHUP unwind like Ctrl-C inside
        the block, so children are killed and the directory removed.
        `concurrent_children` is how many children the check runs at once when
        parallel; the thread count of every phase is decided from it here, once.
        """
        # A scheduler's jobs run side by side whatever this host has (unless asked not to).
        parallel = (
            (self.parallel is not False) if self.executor else wants_parallel(self.parallel, device)
        )
        threads = child_threads(environment, concurrent_children if parallel else 1)
        # Children started here get a TMPDIR of the check's (children_temporary_directory);
        # a scheduler's jobs keep theirs, where the run directory's tmp serves torchrun phases.
        temporary = (
            children_temporary_directory(environment)
            if self.executor is None
            else contextlib.nullcontext(None)
        )
        with (
            terminating_signals_unwind(),
            run_directory(work_dir, self.temporary_root, prefix) as (root, managed),
            temporary as children_temporary,
        ):
            starter = ChildStarter(
                self.start,
                log_dir=root / "warm_servers",
                timeout=self.timeout,
                shared=current_shared_servers(),
                progress=self.progress,
            )
            with contextlib.closing(starter):
                children_environment = threads.environment(environment)
                if children_temporary is not None:
                    children_environment["TMPDIR"] = str(children_temporary)
                settings = RunSettings(
                    command_dir=command_dir,
                    run_root=root,
                    temporary_dir=children_temporary or root / "tmp",
                    environment=children_environment,
                    timeout=self.timeout,
                    preserved=not managed,
                    parallel=parallel,
                    progress=self.progress,
                    threads=threads,
                    starter=starter,
                    executor=self.executor,
                )
                yield settings
                settings.complete_environment_report()

    def finished(self, result: ResultT, report_path: Path | None) -> ResultT:
        """`result`, after writing its machine report to `report_path` when one was asked for."""
        if report_path is not None:
            write_report(report_path, result.to_dict())
        return result
