"""check_runs: two or more configurations of one training script that must end in the same state.

Each variant (extra arguments and environment for the case's command) runs
twice, every run a fresh process, concurrently by default. Order of
decisions: setup; each variant's two runs, observed and compared with each
other (a variant that disagrees with itself: ABSTAIN, nothing can be said
about the others); then every other variant against the first (the
reference): the first variant that differs is the FAIL, at its first
differing path. Verdicts are decided in that order whatever order the
children finish in, so the comparison part of the report does not depend on
scheduling.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
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
    load_runs_case,
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
from trainparity._internal.processes.run_directory import RUNS_PREFIX
from trainparity._internal.protocols import RunsCase
from trainparity._internal.runs.execution import RunsExecution
from trainparity._internal.runs.plan import REPEATS, VARIANT_NAME, RunVariant
from trainparity._internal.runs.result import RunsResult
from trainparity._internal.why.explain import explained_result

__all__ = ["RunVariant", "check_runs"]


def check_runs(
    case: CaseArgument,
    variants: Mapping[str, RunVariant | Mapping[str, Any]] | None = None,
    *,
    comparison: ExactComparison | ToleranceComparison | NoiseComparison | None = None,
    noise: tuple[str, str] | None = None,
    cwd: Path | None = None,
    work_dir: Path | None = None,
    report_path: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    parallel: bool | None = None,
    progress: bool | ProgressCallback | None = None,
    executor: PhaseExecutor | None = None,
    start: str | None = None,
    explain: bool = False,
    reuse_baselines: bool | Path = False,
) -> RunsResult:
    """Check that every variant of the case's run ends in the same observed state.

    `case` is an importable "package.module:ClassName" (or the class itself,
    sent by value when defined in a notebook or `__main__`) with `name`,
    `total_step`, `command(plan)`, `checkpoint_path(run_dir)` and
    `observe_checkpoint(path)` (any resume case qualifies), or a CommandCase. `variants` maps
    a name to `RunVariant(args=..., env=...)` or `{"args": [...], "env":
    {...}}`; None takes the case's own `variants` attribute. The first
    variant is the reference. Each variant runs twice; PASS when all agree
    under `comparison` (exact by default), FAIL naming the first variant
    that differs and its first path, ABSTAIN when a variant disagrees with
    itself, ERROR when something could not run or be observed. `executor`
    runs the training runs elsewhere, as check_resume's does.
    Under `comparison=NoiseComparison(...)`, `noise=("ref", "ref_repeat")`
    names two variants whose difference is accepted as noise (default: the
    reference's own two runs); their runs measure the envelope and every other
    variant is judged against it (docs/runs.md).
    `start="warm"` forks each `python script.py`/`python -m` child from a
    server that imported torch once (docs/limitations.md says what differs);
    None takes $TRAINPARITY_START, else "fresh": a new interpreter per child.
    `reuse_baselines=True` keeps the reference variant's two runs between
    checks, as check_resume keeps its baselines (docs/runs.md, "Reusing
    baselines"); the report's `baselines_reused` says what each did.
    """
    baseline_cache = cache_directory(checked_reuse_baselines(reuse_baselines))
    runner = _RunsRunner(
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
        variants,
        noise=noise,
        cwd=cwd,
        work_dir=work_dir,
        report_path=report_path,
        environment=environment,
        baseline_cache=baseline_cache,
    )
    if not explain:
        return result
    explained = explained_result(
        result,
        case=case,
        variants=variants,
        cwd=cwd,
        environment=environment,
        timeout=timeout,
        temporary_root=temporary_root,
        start=start,
    )
    return runner.finished(explained, report_path) if explained is not result else result


class _RunsRunner(CheckRunner):
    """Runs one check_runs."""

    def run(
        self,
        case: CaseArgument,
        variants: Mapping[str, Any] | None,
        *,
        noise: tuple[str, str] | None = None,
        cwd: Path | None,
        work_dir: Path | None,
        report_path: Path | None,
        environment: Mapping[str, str] | None,
        baseline_cache: Path | None = None,
    ) -> RunsResult:
        started = time.perf_counter()
        command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
        fields: dict[str, Any] = {
            "case": reported_case(case),
            "case_argument": case,
            "propagated_environment_keys": tuple(sorted(environment))
            if environment is not None
            else (),
            **policy_report_fields(self.policy),
        }
        try:
            loaded, module_spec = resolved_case(case, load_runs_case)
            declared = _declared_variants(loaded, variants)
            noise_pair = _noise_pair(self.policy, noise, declared)
            environment_for_children = child_environment(module_spec, environment)
        except Exception as error:  # importing runs the user's module: anything can fail
            failure = setup_failure("runs ", error, command_dir=command_dir)
            result = RunsResult(
                outcome=Outcome.ERROR,
                message=failure.message,
                timing_seconds={"total_wall": time.perf_counter() - started},
                environment=environment_fingerprint(),
                usage_error=failure.usage_field,
                **fields,
            )
            return self.finished(result, report_path)
        fields.update(command_report_fields(loaded, environment_for_children, command_dir))
        fields["variants"] = tuple(declared)
        fields["reference_variant"] = next(iter(declared))
        fields["variant_environment_keys"] = {
            name: tuple(sorted(variant.env)) for name, variant in declared.items()
        }
        fields["variant_args"] = {name: tuple(variant.args) for name, variant in declared.items()}
        fields["declared_variants"] = declared
        with self.run_settings(
            work_dir=work_dir,
            prefix=RUNS_PREFIX,
            command_dir=command_dir,
            environment=environment_for_children,
            device=getattr(loaded, "device", "cpu"),
            concurrent_children=len(declared) * len(REPEATS),
        ) as settings:
            fields["environment"] = settings.environment_report()
            execution = RunsExecution(
                case_spec=children_case_spec(case, settings.run_root),
                case=loaded,
                variants=declared,
                policy=self.policy,
                settings=settings,
                noise_pair=noise_pair,
                baseline_cache=baseline_cache,
            )
            result = execution.run(fields, started)
        return self.finished(result, report_path)


def _declared_variants(case: RunsCase, variants: Mapping[str, Any] | None) -> dict[str, RunVariant]:
    source = variants if variants is not None else getattr(case, "variants", None)
    if source is None:
        raise CaseSetupError(
            "give variants=... or declare a `variants` mapping on the case", field="variants"
        )
    if not isinstance(source, Mapping):
        raise CaseSetupTypeError(
            f"variants must be a mapping of name to variant, not {type(source).__name__}",
            field="variants",
        )
    if len(source) < 2:
        raise CaseSetupError(
            f"check_runs needs at least two variants, got {len(source)}", field="variants"
        )
    declared = {}
    for name, variant in source.items():
        if not isinstance(name, str) or not VARIANT_NAME.fullmatch(name):
            raise CaseSetupError(
                f"variant name {name!r} must be letters, digits, '_', '.' or '-' (it names a directory)",
                field="variants",
            )
        declared[name] = _variant(name, variant)
    total = case.total_step
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise CaseSetupError(
            f"total_step must be a positive int, got {total!r}", field="total_step"
        )
    if not case.name:
        raise CaseSetupError("case name must be non-empty", field="name")
    return declared


def _noise_pair(
    policy: object, noise: object, declared: Mapping[str, RunVariant]
) -> tuple[str, str] | None:
    """The variants whose runs measure the noise (NoiseComparison only); usage errors name `noise`."""
    if not isinstance(policy, NoiseComparison):
        if noise is not None:
            raise CaseSetupError(
                "noise=(A, B) names the variants that measure the noise of a NoiseComparison: "
                "give comparison=NoiseComparison(...) too",
                field="noise",
            )
        return None
    if noise is None:
        reference = next(iter(declared))
        pair = (reference, reference)
    else:
        if (
            isinstance(noise, str)
            or not isinstance(noise, (tuple, list))
            or len(noise) != 2
            or not all(isinstance(name, str) for name in noise)
        ):
            raise CaseSetupTypeError(
                f"noise must be a pair of variant names, got {noise!r}", field="noise"
            )
        pair = (noise[0], noise[1])
        unknown = [name for name in pair if name not in declared]
        if unknown:
            raise CaseSetupError(
                f"noise names {unknown[0]!r}, which is not a variant (declared: "
                f"{', '.join(declared)})",
                field="noise",
            )
    if not [name for name in declared if name not in pair]:
        raise CaseSetupError(
            "every variant is in the noise pair: declare at least one more variant to judge",
            field="noise",
        )
    return pair


def _variant(name: str, variant: object) -> RunVariant:
    """RunVariant.of, its complaints about the variant's shape as usage errors."""
    try:
        return RunVariant.of(name, variant)
    except TypeError as error:
        raise CaseSetupTypeError(str(error), field="variants") from error
    except ValueError as error:
        raise CaseSetupError(str(error), field="variants") from error
