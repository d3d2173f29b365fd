"""Where a training phase runs: the check's cwd, or a directory its case names.

Every phase runs in the check's cwd (`plan.cwd`, CONTRACT §6.6) unless its
case has `phase_cwd(plan)`, as `CommandCase(cwd="{run_dir}")` has: then it
runs there, for scripts that save into their working directory. A phase run
elsewhere gets the check's cwd first on PYTHONPATH, so that `python -m
package.module` still imports the package it would have found from there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from trainparity._internal.protocols import ProcessExecutionPlan

__all__ = ["phase_cwd", "phase_environment"]


def phase_cwd(case: object, plan: ProcessExecutionPlan) -> Path:
    """The directory the phase of `plan` runs in; TypeError if the case's hook gives no Path."""
    hook = getattr(case, "phase_cwd", None)
    if hook is None:
        return plan.cwd
    directory = hook(plan)
    if not isinstance(directory, Path):
        raise TypeError(f"phase_cwd must return a pathlib.Path, got {type(directory).__name__}")
    return directory


def phase_environment(
    environment: Mapping[str, str], *, cwd: Path, check_cwd: Path
) -> dict[str, str]:
    """`environment`, with `check_cwd` first on PYTHONPATH when the phase runs elsewhere."""
    variables = dict(environment)
    if cwd != check_cwd:
        existing = variables.get("PYTHONPATH")
        variables["PYTHONPATH"] = str(check_cwd) + (os.pathsep + existing if existing else "")
    return variables
