"""check_accumulation: one full-batch update vs a declared microbatch plan, each in a fresh process.

Three children (`baseline_a`, `baseline_b` with the one-microbatch baseline
plan, `candidate` with the declared plan) each build the case from the same
seed, record the initial state and five phases of one optimizer-update
boundary into one snapshot file, and publish a small JSON result. The parent
decides in the contract's order (docs/compatibility.md, "check_accumulation"): children in order, distinct
PIDs, initial states, then each phase — baseline self-consistency first
(else ABSTAIN), then baseline vs candidate (else FAIL). The children are
independent, so by default they run concurrently on CPU; the verdict is the
same either way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.accumulation.execution import (
    CHILD_NAMES,
    SPLIT_REFERENCE,
    AccumulationExecution,
)
from trainparity._internal.accumulation.plan import (
    INITIAL_KEY,
    PHASES,
    AccumulationExecutionPlan,
    UnsafeBatchSplit,
    split_for_case,
    split_tensor_tree,
)
from trainparity._internal.accumulation.result import AccumulationResult
from trainparity._internal.accumulation.user_step import check_own_step_plan, has_train_step
from trainparity._internal.cases.command_case import children_case_spec, reported_case
from trainparity._internal.cases.loading import (
    CaseSetupError,
    CaseSetupTypeError,
    load_accumulation_case,
    setup_failure,
)
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    ExactComparison,
    ToleranceComparison,
)
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_runner import CheckRunner
from trainparity._internal.processes.progress import ProgressCallback
from trainparity._internal.processes.run_directory import ACCUMULATION_PREFIX
from trainparity._internal.reports.machine import report_text, write_report

# The plan, its phases and the splitting live in accumulation_plan and the
# children in accumulation_execution; their public names are part of this module's.
__all__ = [
    "CHILD_NAMES",
    "INITIAL_KEY",
    "PHASES",
    "AccumulationExecutionPlan",
    "AccumulationRunner",
    "UnsafeBatchSplit",
    "check_accumulation",
    "split_for_case",
    "split_tensor_tree",
    "write_accumulation_report",
]

_REPORT_FIXPOINT_ROUNDS = 8


def check_accumulation(
    case: str | type,
    *,
    candidate: AccumulationExecutionPlan,
    comparison: ExactComparison | ToleranceComparison | NoiseComparison | None = None,
    device: str = "cpu",
    seed: int = 23,
    cwd: Path | None = None,
    report_path: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    work_dir: Path | None = None,
    parallel: bool | None = None,
    progress: bool | ProgressCallback | None = None,
    start: str | None = None,
) -> AccumulationResult:
    """Check that `candidate` gives the same update as one full batch, at one optimizer boundary.

    `case` is an importable "package.module:ClassName" implementing
    AccumulationCase, or the class itself (one defined in a notebook cell or
    in `__main__` goes to the workers by value: cloudpickle). Three fresh
    processes run the baseline twice and the candidate once on `device` from `seed`; FAIL names the first observed
    phase and path (e.g. `loss_accounting.denominator`). `timeout` applies to
    each child. `work_dir` keeps each child's directory (logs, result,
    observations) instead of a temporary one. `parallel=None` runs the
    children concurrently unless `device` is CUDA. `progress=True` prints
    child start/end lines to stderr; a callable receives ProgressEvents.
    `start="warm"` forks each `python script.py`/`python -m` child from a
    server that imported torch once (docs/limitations.md says what differs);
    None takes $TRAINPARITY_START, else "fresh": a new interpreter per child.
    """
    runner = AccumulationRunner(
        comparison=comparison if comparison is not None else ExactComparison(),
        timeout=timeout,
        temporary_root=temporary_root,
        parallel=parallel,
        progress=progress,
        start=start,
    )
    return runner.run(
        case,
        candidate=candidate,
        device=device,
        seed=seed,
        cwd=cwd,
        report_path=report_path,
        environment=environment,
        work_dir=work_dir,
    )


class AccumulationRunner(CheckRunner):
    """Runs accumulation checks; the internal object behind check_accumulation (docs/compatibility.md, "Surface")."""

    def __init__(self, *, comparison: ComparisonPolicy, **options: Any) -> None:
        """`comparison` is required (docs/compatibility.md, "Surface"); `options` as CheckRunner takes them."""
        if comparison is None:  # no silent exact default here, unlike check_accumulation's
            raise TypeError("comparison must be explicit ExactComparison or ToleranceComparison")
        super().__init__(comparison=comparison, **options)

    def run(
        self,
        case: str | type,
        *,
        candidate: AccumulationExecutionPlan,
        device: str = "cpu",
        seed: int = 23,
        cwd: Path | None = None,
        report_path: Path | None = None,
        environment: Mapping[str, str] | None = None,
        work_dir: Path | None = None,
    ) -> AccumulationResult:
        if not isinstance(candidate, AccumulationExecutionPlan):
            raise TypeError(
                f"candidate must be an AccumulationExecutionPlan, got {type(candidate).__name__}"
            )
        if not isinstance(device, str):
            raise TypeError(f"device must be a str such as 'cpu' or 'cuda', not {device!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, not {seed!r}")
        baseline = AccumulationExecutionPlan(1, clip_grad_norm=candidate.clip_grad_norm)
        policy_name = self.policy.name
        command_dir = Path(cwd) if cwd is not None else Path.cwd()
        try:
            candidate.validate()  # a TypeError (wrong field type) is raised to the caller
        except ValueError as error:
            usage = CaseSetupError(str(error), field="candidate")
            return self.finished(_setup_error(case, policy_name, usage, command_dir), report_path)
        try:
            loaded = load_accumulation_case(case)
            equivalence = declared_equivalence(loaded)
            own_step = has_train_step(loaded)
            if own_step:
                check_own_step_plan(candidate)
        except Exception as error:  # importing runs the user's module: anything can fail
            return self.finished(_setup_error(case, policy_name, error, command_dir), report_path)
        # The full-batch baselines (more under NoiseComparison), then the candidate.
        noise = isinstance(self.policy, NoiseComparison)
        baseline_count = self.policy.baselines if noise else 2
        plans = {f"baseline_{chr(ord('a') + index)}": baseline for index in range(baseline_count)}
        if noise:
            # One more sample of the same update, summed in another valid order: our loop
            # over the candidate's microbatches. On a deterministic machine the full-batch
            # baselines agree bit for bit, so this is the rounding a split may bring.
            plans[SPLIT_REFERENCE] = AccumulationExecutionPlan(
                candidate.microbatch_count, clip_grad_norm=candidate.clip_grad_norm
            )
        plans["candidate"] = candidate
        # The children's complete environment: ours, with the caller's variables on top.
        child_environment = {**os.environ, **dict(environment or {})}
        with self.run_settings(
            work_dir=work_dir,
            prefix=ACCUMULATION_PREFIX,
            command_dir=command_dir,
            environment=child_environment,
            device=device,
            concurrent_children=len(plans),  # a multi-rank candidate shares its child's
        ) as settings:
            # Before the workers: a warm check's torch facts arrive with their observations.
            environment_report = settings.environment_report()
            execution = AccumulationExecution(
                case_spec=children_case_spec(case, settings.run_root),
                plans=plans,
                device=device,
                seed=seed,
                settings=settings,
                policy=self.policy,
                own_step=own_step,
            )
            decision = execution.run()
        result = decision.result(
            case=reported_case(case),
            equivalence=equivalence,
            comparison_policy=policy_name,
            peak_temporary_directory_bytes=execution.peak_bytes,
            environment=environment_report,
        )
        return self.finished(result, report_path)

    def finished(self, result: AccumulationResult, report_path: Path | None) -> AccumulationResult:
        """`result`, its report written so that `persisted_artifact_bytes` is the report's own size."""
        if report_path is None:
            return result
        return write_accumulation_report(result, Path(report_path))


def declared_equivalence(case: object) -> str:
    """The case's declared equivalence relation: a non-empty str."""
    equivalence = case.equivalence  # type: ignore[attr-defined]
    if not isinstance(equivalence, str):
        raise CaseSetupTypeError(
            f"case equivalence must be a str describing the declared relation, got {type(equivalence).__name__}",
            field="equivalence",
        )
    if not equivalence.strip():
        raise CaseSetupError(
            "case must declare a non-empty equivalence relation", field="equivalence"
        )
    return equivalence


def _setup_error(
    case: str | type, policy_name: str, error: Exception, command_dir: Path
) -> AccumulationResult:
    failure = setup_failure("", error, command_dir=command_dir)
    return AccumulationResult(
        outcome=Outcome.ERROR,
        message=failure.message,
        case=reported_case(case),
        equivalence="",
        comparison_policy=policy_name,
        usage_error=failure.usage_field,
    )


def write_accumulation_report(result: AccumulationResult, path: Path) -> AccumulationResult:
    """Write the report so that its `persisted_artifact_bytes` equals its own byte length (§7.10)."""
    size = result.persisted_artifact_bytes
    for _ in range(_REPORT_FIXPOINT_ROUNDS):
        result = dataclasses.replace(result, persisted_artifact_bytes=size)
        encoded = len(report_text(result.to_dict()).encode("utf-8"))
        if encoded == size:
            break
        size = encoded
    else:
        raise RuntimeError("accumulation report byte size did not stabilize")
    written = write_report(path, result.to_dict())
    on_disk = path.stat().st_size
    if written != size or on_disk != size:
        raise OSError(f"report {path} has {on_disk} bytes on disk, expected {size}")
    return result
