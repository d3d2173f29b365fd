"""What a SLURM job of a check runs on its node: one phase's command, as a local check would.

submitit calls `run_phase` inside the job. The phase's command runs under
the same ChildGroup discipline as on the checking host (own process group,
timeout with SIGTERM then SIGKILL, logs to the phase's files, resources from
wait4), and only plain values travel back in submitit's result file. The
job's own SLURM_* variables are added to the phase's environment, so an
`srun torchrun ...` command sees its allocation.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from trainparity._internal.processes.group import ChildSpec, run_children

__all__ = ["run_phase"]


def run_phase(
    name: str,
    argv: list[str],
    cwd: str,
    environment: dict[str, str],
    stdout_path: str,
    stderr_path: str,
    timeout: float,
) -> dict[str, Any]:
    """Run one phase to its end on this node; its ChildResult's fields."""
    allocation = {key: value for key, value in os.environ.items() if key.startswith("SLURM")}
    spec = ChildSpec(
        name=name,
        argv=argv,
        cwd=Path(cwd),
        env={**environment, **allocation},
        stdout_path=Path(stdout_path),
        stderr_path=Path(stderr_path),
    )
    (result,) = run_children([spec], timeout=timeout)
    return dataclasses.asdict(result)
