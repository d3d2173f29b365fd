"""check_crashes: kill the job at every step and inside every save, restart it, compare.

Order of decisions (docs/crashes.md): setup; the uninterrupted baselines,
traced (their records must agree, else ABSTAIN); the crash points found in
baseline_a's trace, in time order (`max_points` spreads a budget over them);
per group of points that leave the same disk image, one run killed there
(SIGKILL), then, per distinct image (and with `power_loss`, per power-loss
image), the same command restarted in the same run directory; each restart's
records against the baseline's. FAIL names the first point, in time order,
whose restart breaks.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainparity._internal.cases.command_case import (
    CaseArgument,
    CommandCase,
    command_report_fields,
    reported_case,
)
from trainparity._internal.cases.loading import CaseSetupError, CaseSetupTypeError, setup_failure
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    ExactComparison,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity._internal.crashes.execution import CrashExecution
from trainparity._internal.crashes.points import SAVES, STEPS
from trainparity._internal.crashes.result import CrashResult
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_runner import CheckRunner
from trainparity._internal.processes.child_environment import child_environment
from trainparity._internal.processes.progress import ProgressCallback
from trainparity._internal.processes.traced_job import TracingUnavailable, tracing_available

__all__ = ["CRASH_POINT_KINDS", "check_crashes"]

CRASH_POINT_KINDS = (STEPS, SAVES)
_PREFIX = "trainparity-crashes-"


def check_crashes(
    case: CaseArgument,
    *,
    points: Sequence[str] = CRASH_POINT_KINDS,
    power_loss: bool = False,
    max_points: int | None = None,
    max_lost_steps: int | None = None,
    comparison: ExactComparison | ToleranceComparison | NoiseComparison | None = None,
    cwd: Path | None = None,
    work_dir: Path | None = None,
    report_path: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    parallel: bool | None = None,
    progress: bool | ProgressCallback | None = None,
    start: str | None = None,
) -> CrashResult:
    """Check that the job, killed at any crash point and restarted, ends as if never stopped.

    `case` is a CommandCase whose `checkpoint` names the job's checkpoint
    location (`"{run_dir}/ckpts"`) and whose template resumes by itself from
    what it finds there (no `{resume_from?}`); the job calls
    `trainparity.record(step, state)` right after loading and after every
    step. `points`: "steps" (after each record()), "saves" (before each
    file-system mutation in the checkpoint location: write, pwrite, writev,
    ftruncate, fsync, fdatasync, rename, unlink, mkdir, close, a creating
    open). `power_loss=True` also restarts each save point from the images a
    power loss can leave (docs/crashes.md, "Power loss"). `max_points`
    spreads a budget over the points, always keeping each save's first and
    last write, each rename and each fsync. `max_lost_steps`: a restart that
    redoes more steps FAILs. `comparison`: how each redone step is compared
    with the uninterrupted one (exact by default). `timeout` applies to each
    run. `parallel=None` runs two jobs at a time. `start="warm"` forks each
    `python script.py` job from a server that imported torch once and traces it
    from there (None: $TRAINPARITY_START, else "fresh"). Returns PASS, FAIL (the
    first breaking crash point), ABSTAIN (the uninterrupted runs disagree)
    or ERROR.
    """
    runner = CheckRunner(
        comparison=comparison,
        timeout=timeout,
        temporary_root=temporary_root,
        parallel=parallel,
        progress=progress,
        start=start,
    )
    started = time.perf_counter()
    command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
    fields = {
        "case": reported_case(case),
        "case_argument": case,
        "power_loss": bool(power_loss),
        "max_lost_steps": max_lost_steps,
        **policy_report_fields(runner.policy),
    }
    try:
        kinds = _checked_setup(case, points, max_points, max_lost_steps)
        assert isinstance(case, CommandCase)
        variables = child_environment(None, environment)
    except Exception as error:
        failure = setup_failure("crash ", error, command_dir=command_dir)
        result = CrashResult(
            outcome=Outcome.ERROR,
            message=failure.message,
            environment=environment_fingerprint(),
            usage_error=failure.usage_field,
            timing_seconds={"total_wall": time.perf_counter() - started},
            **fields,
        )
        return runner.finished(result, report_path)
    fields.update(_command_fields(case, variables, command_dir))
    with runner.run_settings(
        work_dir=work_dir,
        prefix=_PREFIX,
        command_dir=command_dir,
        environment=variables,
        device="cpu",
        concurrent_children=2,
    ) as settings:
        execution = CrashExecution(
            case=case,
            policy=runner.policy,
            settings=settings,
            kinds=kinds,
            power_loss=bool(power_loss),
            max_points=max_points,
            max_lost_steps=max_lost_steps,
        )
        found = execution.run()
        environment_report = settings.environment_report()
    timing = dict(found.fields.pop("timing_seconds", {}) or {})
    timing["total_wall"] = time.perf_counter() - started
    result = CrashResult(
        outcome=found.outcome,
        message=found.message,
        environment=environment_report,
        timing_seconds=timing,
        **fields,
        **found.fields,
    )
    return runner.finished(result, report_path)


def _checked_setup(
    case: CaseArgument,
    points: Sequence[str],
    max_points: int | None,
    max_lost_steps: int | None,
) -> tuple[str, ...]:
    if not tracing_available():
        raise TracingUnavailable(
            "the crash check's tracer needs Linux on x86-64 or AArch64 (ptrace and seccomp)"
        )
    if not isinstance(case, CommandCase):
        raise CaseSetupTypeError(
            "check_crashes needs a CommandCase: the job's own command, which resumes by itself "
            "from its checkpoint location, e.g. CommandCase(template=['python', 'train.py', "
            "'--ckpt-dir', '{checkpoint}'], checkpoint='{run_dir}/ckpts', total_step=8)",
            field="case",
        )
    if case.parsed.uses("resume_from?"):
        raise CaseSetupError(
            "a crash check's command must not take {resume_from?}: after a crash the job is "
            "restarted with the same command and must find its newest checkpoint by itself",
            field="command",
        )
    if isinstance(points, str):
        points = tuple(item.strip() for item in points.split(",") if item.strip())
    kinds = tuple(dict.fromkeys(points))
    unknown = [kind for kind in kinds if kind not in CRASH_POINT_KINDS]
    if unknown or not kinds:
        raise CaseSetupError(
            f"points must name {' and/or '.join(CRASH_POINT_KINDS)}, got {list(points)!r}",
            field="points",
        )
    for name, value in (("max_points", max_points), ("max_lost_steps", max_lost_steps)):
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < (1 if name == "max_points" else 0)
        ):
            raise CaseSetupTypeError(
                f"{name} must be None or an int >= {1 if name == 'max_points' else 0}, got {value!r}",
                field=name,
            )
    return kinds


def _command_fields(case: CommandCase, variables: Mapping[str, str], command_dir: Path) -> dict:
    found = command_report_fields(case, variables, command_dir)
    return {key: found[key] for key in ("command_interpreter", "command_case") if key in found}
