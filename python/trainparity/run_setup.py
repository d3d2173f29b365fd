"""Set-up shared by the checks that run children: timeout, concurrency default, run settings."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainparity.progress import ProgressReporter
from trainparity.run_directory import run_directory
from trainparity.termination import terminating_signals_unwind


@dataclass(frozen=True)
class RunSettings:
    """Where and how one check runs its children; the same for every orchestrator.

    command_dir is the children's working directory, run_root the directory
    holding each child's own directory, environment the children's complete
    environment, timeout the per-child limit in seconds. preserved is True when
    run_root is the user's work_dir (kept afterwards, so messages may point
    into it); parallel says whether independent children run at once.
    """

    command_dir: Path
    run_root: Path
    environment: Mapping[str, str]
    timeout: float
    preserved: bool
    parallel: bool
    progress: ProgressReporter


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
    """Independent children run at once unless asked not to, on CUDA, or on one core."""
    if parallel is not None:
        return parallel
    on_cuda = isinstance(device, str) and device.startswith("cuda")
    return not on_cuda and (os.cpu_count() or 1) > 1


@contextmanager
def check_run_settings(
    *,
    work_dir: Path | None,
    temporary_root: Path | None,
    prefix: str,
    command_dir: Path,
    environment: Mapping[str, str],
    timeout: float,
    parallel: bool | None,
    device: object,
    progress: ProgressReporter,
) -> Iterator[RunSettings]:
    """One check's run directory and settings, for the duration of the block.

    The run directory is `work_dir` (kept) or a managed temporary directory
    named with `prefix` (removed); SIGTERM/SIGHUP unwind like Ctrl-C inside
    the block, so children are killed and the directory removed.
    """
    with (
        terminating_signals_unwind(),
        run_directory(work_dir, temporary_root, prefix) as (root, managed),
    ):
        yield RunSettings(
            command_dir=command_dir,
            run_root=root,
            environment=environment,
            timeout=timeout,
            preserved=not managed,
            parallel=wants_parallel(parallel, device),
            progress=progress,
        )
