"""The result of `check_crashes`."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from trainparity._internal.processes.check_result import CheckResult

__all__ = ["CrashResult"]


@dataclass(frozen=True, repr=False)
class CrashResult(CheckResult):
    """The verdict of `check_crashes` (docs/crashes.md) and its table of crash points.

    `crash_points`: one row per crash point (and power-loss image), in time
    order: the point, what the restart loaded, the steps it redid, the verdict.
    `first_failing_point`: the name of the first point whose restart breaks (FAIL).
    """

    _: KW_ONLY
    crash_points: tuple[dict[str, Any], ...] = ()
    first_failing_point: str | None = None
    points_found: int = 0
    points_run: int = 0
    crash_runs: int = 0
    restarts: int = 0
    distinct_images: int = 0
    power_loss: bool = False
    max_steps_redone: int | None = None
    max_lost_steps: int | None = None
    checkpoint_location: str | None = None
    timing_seconds: dict[str, float] | None = None
    command_interpreter: str | None = field(default=None, metadata={"omitted_when_none": True})
    command_case: dict[str, Any] | None = field(default=None, metadata={"omitted_when_none": True})
    case_argument: Any = field(default=None, compare=False, metadata={"reported": False})
