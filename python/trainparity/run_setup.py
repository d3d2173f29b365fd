"""Set-up shared by the checks that run children: timeout, concurrency default, run settings."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainparity.progress import ProgressReporter


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
