"""The crash tests' jobs as CommandCases, and check_crashes with the suite's settings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainparity import CommandCase, CrashResult, check_crashes
from trainparity._internal.processes.failure_text import log_tail

REPOSITORY = Path(__file__).resolve().parents[1]


def job_case(script: str, *arguments: str, total_step: int, launcher: Sequence[str] = ("python",)):
    """tests/fixtures/crash_jobs/SCRIPT resuming by itself from {run_dir}/ckpts, saving every 2."""
    return CommandCase(
        template=[
            *launcher,
            f"tests/fixtures/crash_jobs/{script}",
            "--ckpt-dir",
            "{checkpoint}",
            "--total-steps",
            "{end_step}",
            "--save-every",
            "2",
            *arguments,
        ],
        checkpoint="{run_dir}/ckpts",
        total_step=total_step,
    )


def stderr_tails(work_dir: Path, lines: int = 20) -> str:
    """The last lines of every run's stderr under a crash check's kept work_dir: how each ended.

    For an assertion's message: a run that failed only by a signal names no stderr line
    in the check's own message.
    """
    tails = []
    for log in sorted(work_dir.rglob("stderr-*.log")):
        text = log_tail(log, lines)
        if text:
            tails.append(f"--- {log.relative_to(work_dir)}\n" + "\n".join(text))
    return "\n".join(tails)


def crashes(case: CommandCase, **keywords: Any) -> CrashResult:
    """check_crashes from the repository, one thread per job, a generous timeout per run."""
    environment = {"OMP_NUM_THREADS": "1", **keywords.pop("environment", {})}
    return check_crashes(case, cwd=REPOSITORY, environment=environment, timeout=240, **keywords)
