"""The phase plan a training process reads from its environment: phase, end step, checkpoint paths.

A case's `command(plan)` hands the plan to the training script through
environment variables (`plan_command` puts them in front of the argv with
`env`, which execs the script, so the child keeps its PID). Scripts built on
the library integrations (`trainparity.integrations.*`) read them back with
`current_phase_plan()`; a process not run by a check finds none and trains as
configured.

| variable | meaning |
| --- | --- |
| `TRAINPARITY_PHASE` | the phase (`baseline_a`, ..., or a `check_runs` variant run such as `accum4x2_a`) |
| `TRAINPARITY_END_STEP` | the optimizer step after which the run saves and stops |
| `TRAINPARITY_CHECKPOINT` | where the run's final checkpoint must be (the case's `checkpoint_path`) |
| `TRAINPARITY_RUN_DIR` | this phase's own directory (outputs that must not collide with other phases) |
| `TRAINPARITY_RESUME_FROM` | the staged checkpoint to resume from (`candidate_resume` only) |
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "PHASE_VARIABLES",
    "PhasePlan",
    "current_phase_plan",
    "plan_command",
    "plan_environment",
]

PHASE_VARIABLES = (
    "TRAINPARITY_PHASE",
    "TRAINPARITY_END_STEP",
    "TRAINPARITY_CHECKPOINT",
    "TRAINPARITY_RUN_DIR",
    "TRAINPARITY_RESUME_FROM",
)


@dataclass(frozen=True)
class PhasePlan:
    """What one training process of a check must do: run to `end_step`, save at `checkpoint`."""

    phase: str
    end_step: int
    checkpoint: Path
    run_dir: Path
    resume_from: Path | None = None


def plan_environment(
    *,
    phase: str,
    end_step: int,
    checkpoint: Path,
    run_dir: Path,
    resume_from: Path | None = None,
) -> dict[str, str]:
    """The environment variables that carry one phase plan."""
    variables = {
        "TRAINPARITY_PHASE": phase,
        "TRAINPARITY_END_STEP": str(int(end_step)),
        "TRAINPARITY_CHECKPOINT": str(checkpoint),
        "TRAINPARITY_RUN_DIR": str(run_dir),
    }
    if resume_from is not None:
        variables["TRAINPARITY_RESUME_FROM"] = str(resume_from)
    return variables


def plan_command(argv: Sequence[str], variables: Mapping[str, str]) -> list[str]:
    """`argv` run with `variables` added to its environment (`env NAME=VALUE ... argv`).

    `env` execs the command, so the training child's PID is the one the check
    started (resume parity relies on distinct PIDs of split and resume).
    """
    launcher = shutil.which("env") or "/usr/bin/env"
    return [launcher, *(f"{name}={value}" for name, value in variables.items()), *argv]


def current_phase_plan(environ: Mapping[str, str] | None = None) -> PhasePlan | None:
    """The plan of the check that started this process, or None when no check did.

    A partial or malformed plan raises ValueError: a script that half-follows
    a check would save at the wrong step and make any verdict meaningless.
    """
    environ = os.environ if environ is None else environ
    present = [name for name in PHASE_VARIABLES if environ.get(name)]
    if not present:
        return None
    missing = [name for name in PHASE_VARIABLES[:4] if not environ.get(name)]
    if missing:
        raise ValueError(f"incomplete trainparity phase plan: {', '.join(missing)} not set")
    try:
        end_step = int(environ["TRAINPARITY_END_STEP"])
    except ValueError:
        raise ValueError(
            f"TRAINPARITY_END_STEP must be an integer, got {environ['TRAINPARITY_END_STEP']!r}"
        ) from None
    if end_step <= 0:
        raise ValueError(f"TRAINPARITY_END_STEP must be positive, got {end_step}")
    resume_from = environ.get("TRAINPARITY_RESUME_FROM")
    return PhasePlan(
        phase=environ["TRAINPARITY_PHASE"],
        end_step=end_step,
        checkpoint=Path(environ["TRAINPARITY_CHECKPOINT"]),
        run_dir=Path(environ["TRAINPARITY_RUN_DIR"]),
        resume_from=Path(resume_from) if resume_from else None,
    )
