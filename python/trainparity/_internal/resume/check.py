"""check_resume: resume parity through real processes — baselines, split, fresh-process resume.

Order of decisions (docs/compatibility.md, "check_resume"): setup; baseline_a and baseline_b
(each trained, then observed); baseline self-consistency (else ABSTAIN);
candidate_split; staging of its checkpoint; candidate_resume in a fresh
process; its observation; the final comparison. Independent children
(baseline_a, baseline_b, candidate_split and the observer worker) run
concurrently by default; verdicts are still decided in that order, so the
comparison part of the report is the same either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.cases.command_case import (
    CaseArgument,
    children_case_spec,
    command_report_fields,
    reported_case,
    resolved_case,
)
from trainparity._internal.cases.loading import (
    CaseSetupError,
    CaseSetupTypeError,
    load_process_case,
    setup_failure,
)
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    ExactComparison,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.baseline_cache import (
    cache_directory,
    checked_reuse_baselines,
)
from trainparity._internal.processes.check_runner import CheckRunner
from trainparity._internal.processes.child_environment import child_environment
from trainparity._internal.processes.executor import PhaseExecutor
from trainparity._internal.processes.progress import ProgressCallback
from trainparity._internal.processes.run_directory import PROCESS_RESUME_PREFIX
from trainparity._internal.protocols import ProcessResumeCase
from trainparity._internal.resume.chain import CandidatePhase, candidate_chain
from trainparity._internal.resume.execution import ResumeExecution, concurrent_children
from trainparity._internal.resume.result import ProcessResumeResult
from trainparity._internal.why.explain import explained_result

__all__ = ["ProcessResumeRunner", "check_resume", "resume_case_setup"]


def check_resume(
    case: CaseArgument,
    *,
    comparison: ExactComparison | ToleranceComparison | NoiseComparison | None = None,
    cwd: Path | None = None,
    work_dir: Path | None = None,
    report_path: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    parallel: bool | None = None,
    progress: bool | ProgressCallback | None = None,
    executor: PhaseExecutor | None = None,
    split_steps: Sequence[int] | None = None,
    world_sizes: Sequence[int] | None = None,
    layouts: Sequence[str] | None = None,
    start: str | None = None,
    explain: bool = False,
    reuse_baselines: bool | Path = False,
) -> ProcessResumeResult:
    """Check that save → exit → fresh-process load → continue reproduces uninterrupted training.

    `case` is an importable "package.module:ClassName" implementing
    ProcessResumeCase, the class itself (one defined in a notebook cell or
    in `__main__` goes to the check's processes by value: cloudpickle), or a
    CommandCase (a command template: no class needed).
    `split_steps` (default: the case's `split_steps`, else
    `(split_step,)`) makes the candidate a chain of resumes, each in a fresh
    process: `(2, 4)` with total_step 6 saves at 2, resumes and saves at 4,
    resumes to 6. `world_sizes` gives each candidate phase its rank count
    (`plan.world_size`; the baselines run on the first): `(2, 1)` saves on 2
    ranks and resumes on 1. `layouts` gives each candidate phase a layout
    name (`plan.layout`; the baselines run on the first): `("dp4", "dp2xtp2")`
    saves on one device mesh and resumes on another. A phase on another world
    size or layout than the first is compared on global tensors reassembled
    from its shards. `timeout` applies to each child. `parallel=None` runs
    the independent phases concurrently on CPU and sequentially when the case
    declares `device = "cuda..."`; True/False force it. `progress=True`
    prints phase start/end lines to stderr; a callable receives ProgressEvent
    objects. `executor` runs the training phases elsewhere (e.g.
    trainparity.executors.SlurmExecutor: one SLURM job per phase); the
    observer and the verdict stay here. Returns PASS, FAIL (first divergent
    path), ABSTAIN or ERROR.
    `start="warm"` forks each `python script.py`/`python -m` child from a
    server that imported torch once (docs/limitations.md says what differs);
    None takes $TRAINPARITY_START, else "fresh": a new interpreter per child.
    `explain=True` reruns the two phases of a FAIL or ABSTAIN that names a
    recorded step, to say why they part (trainparity.explain): the result's
    `explanation`.
    `reuse_baselines=True` keeps the baselines' outputs in
    $XDG_CACHE_HOME/trainparity/baselines (a Path: there) and restores them,
    verified, in the next check whose baselines would run the same way
    (docs/resume.md, "Reusing baselines"); the report's `baselines_reused`
    says, per baseline, whether it was reused or ran, and why.
    """
    baseline_cache = cache_directory(checked_reuse_baselines(reuse_baselines))
    runner = ProcessResumeRunner(
        comparison=comparison,
        timeout=timeout,
        temporary_root=temporary_root,
        parallel=parallel,
        progress=progress,
        executor=executor,
        start=start,
    )
    result = runner.run(
        case,
        cwd=cwd,
        work_dir=work_dir,
        report_path=report_path,
        environment=environment,
        split_steps=split_steps,
        world_sizes=world_sizes,
        layouts=layouts,
        baseline_cache=baseline_cache,
    )
    if not explain:
        return result
    explained = explained_result(
        result,
        case=case,
        cwd=cwd,
        environment=environment,
        timeout=timeout,
        temporary_root=temporary_root,
        start=start,
    )
    return runner.finished(explained, report_path) if explained is not result else result


class ProcessResumeRunner(CheckRunner):
    """Runs one resume check; the internal object behind check_resume (docs/compatibility.md, "Surface")."""

    def run(
        self,
        case: CaseArgument,
        *,
        cwd: Path | None = None,
        work_dir: Path | None = None,
        report_path: Path | None = None,
        environment: Mapping[str, str] | None = None,
        staged_checkpoint_hook: Callable[[Path], None] | None = None,
        split_steps: Sequence[int] | None = None,
        world_sizes: Sequence[int] | None = None,
        layouts: Sequence[str] | None = None,
        baseline_cache: Path | None = None,
    ) -> ProcessResumeResult:
        """`baseline_cache`: where the baselines are kept between checks (None: not kept)."""
        started = time.perf_counter()
        command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
        propagated = tuple(sorted(environment)) if environment is not None else ()
        fields: dict[str, Any] = {
            "case": reported_case(case),
            "case_argument": case,
            "propagated_environment_keys": propagated,
            **policy_report_fields(self.policy),
        }
        try:
            loaded, child_environment, chain = resume_case_setup(
                case, environment, split_steps, world_sizes, layouts
            )
        except Exception as error:  # importing runs the user's module: anything can fail
            failure = setup_failure("process ", error, command_dir=command_dir)
            fields["timing_seconds"] = {"total_wall": time.perf_counter() - started}
            result = ProcessResumeResult(
                outcome=Outcome.ERROR,
                message=failure.message,
                environment=environment_fingerprint(),
                usage_error=failure.usage_field,
                **fields,
            )
            return self.finished(result, report_path)
        fields.update(command_report_fields(loaded, child_environment, command_dir))
        with self.run_settings(
            work_dir=work_dir,
            prefix=PROCESS_RESUME_PREFIX,
            command_dir=command_dir,
            environment=child_environment,
            device=getattr(loaded, "device", "cpu"),
            concurrent_children=concurrent_children(self.policy),
        ) as settings:
            # The children's allow-listed variables (CUBLAS_WORKSPACE_CONFIG, ...) are what mattered.
            fields["environment"] = settings.environment_report()
            execution = ResumeExecution(
                case_spec=children_case_spec(case, settings.run_root),
                case=loaded,
                policy=self.policy,
                settings=settings,
                staged_checkpoint_hook=staged_checkpoint_hook,
                chain=chain,
                baseline_cache=baseline_cache,
            )
            result = execution.run(fields, started)
        return self.finished(result, report_path)


def resume_case_setup(
    spec: CaseArgument,
    environment: Mapping[str, str] | None,
    split_steps: Sequence[int] | None = None,
    world_sizes: Sequence[int] | None = None,
    layouts: Sequence[str] | None = None,
) -> tuple[ProcessResumeCase, dict[str, str], tuple[CandidatePhase, ...]]:
    """Load and validate the case, its candidate chain and the children's environment (docs/compatibility.md, "check_resume")."""
    case, module_spec = resolved_case(spec, load_process_case)
    if not case.name:
        raise CaseSetupError("case name must be non-empty", field="name")
    split, total = case.split_step, case.total_step
    for field, value in (("split_step", split), ("total_step", total)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise CaseSetupTypeError(f"{field} must be an int, got {value!r}", field=field)
    if not 0 < split < total:
        raise CaseSetupError(
            f"need 0 < split_step < total_step, got {split} and {total}", field="split_step"
        )
    if split_steps is None:
        split_steps = getattr(case, "split_steps", None) or (split,)
    chain = candidate_chain(split_steps, world_sizes, total, layouts)
    return case, child_environment(module_spec, environment), chain
