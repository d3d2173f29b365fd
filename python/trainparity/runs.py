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

import dataclasses
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainparity.child_environment import child_environment
from trainparity.comparison import (
    Difference,
    ExactComparison,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity.environment import environment_fingerprint
from trainparity.importing import load_runs_case
from trainparity.observer_client import ObservationFailure, ObserverClient
from trainparity.outcomes import Outcome
from trainparity.processes import ChildGroup, ChildLaunchError, ChildResult, ChildSpec
from trainparity.progress import ProgressCallback, ProgressReporter
from trainparity.protocols import ProcessExecutionPlan, RunsCase
from trainparity.reports import write_report
from trainparity.results import ExternalProcessEvidence
from trainparity.resume_execution import _NONDETERMINISM_VARIABLES, _path_bytes, _validated_command
from trainparity.run_directory import RUNS_PREFIX, run_directory
from trainparity.run_setup import RunSettings, checked_parallel, checked_timeout, wants_parallel
from trainparity.runs_result import RunsResult, VariantComparison
from trainparity.snapshot import Snapshot
from trainparity.termination import terminating_signals_unwind

__all__ = ["RunVariant", "check_runs"]

REPEATS = ("a", "b")
_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class RunVariant:
    """One configuration of the case's script: arguments appended to its command, environment added."""

    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, declared: object) -> RunVariant:
        """A RunVariant from a RunVariant, or a mapping with the keys `args` and `env`."""
        if isinstance(declared, RunVariant):
            variant = declared
        elif isinstance(declared, Mapping):
            unknown = sorted(set(declared) - {"args", "env"})
            if unknown:
                raise ValueError(f"variant {name!r}: unknown keys {unknown} (use 'args' and 'env')")
            args = declared.get("args", ())
            if isinstance(args, str):
                raise TypeError(f"variant {name!r}: args must be a list of str, not one string")
            variant = cls(args=tuple(args), env=dict(declared.get("env", {})))
        else:
            raise TypeError(
                f"variant {name!r} must be a RunVariant or a mapping with 'args' and 'env', "
                f"not {type(declared).__name__}"
            )
        if not all(isinstance(item, str) and "\0" not in item for item in variant.args):
            raise TypeError(f"variant {name!r}: args must be str without NUL characters")
        for key, value in variant.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"variant {name!r}: env keys and values must be str")
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"variant {name!r}: invalid environment variable {key!r}")
        return cls(args=variant.args, env=dict(variant.env))


def check_runs(
    case: str,
    variants: Mapping[str, RunVariant | Mapping[str, Any]] | None = None,
    *,
    comparison: ExactComparison | ToleranceComparison | None = None,
    cwd: Path | None = None,
    work_dir: Path | None = None,
    report_path: Path | None = None,
    environment: Mapping[str, str] | None = None,
    timeout: float = 300.0,
    temporary_root: Path | None = None,
    parallel: bool | None = None,
    progress: bool | ProgressCallback | None = None,
) -> RunsResult:
    """Check that every variant of the case's run ends in the same observed state.

    `case` is an importable "package.module:ClassName" with `name`,
    `total_step`, `command(plan)`, `checkpoint_path(run_dir)` and
    `observe_checkpoint(path)` (any resume case qualifies). `variants` maps
    a name to `RunVariant(args=..., env=...)` or `{"args": [...], "env":
    {...}}`; None takes the case's own `variants` attribute. The first
    variant is the reference. Each variant runs twice; PASS when all agree
    under `comparison` (exact by default), FAIL naming the first variant
    that differs and its first path, ABSTAIN when a variant disagrees with
    itself, ERROR when something could not run or be observed.
    """
    runner = _RunsRunner(
        comparison=comparison,
        timeout=timeout,
        temporary_root=temporary_root,
        parallel=parallel,
        progress=progress,
    )
    return runner.run(
        case,
        variants,
        cwd=cwd,
        work_dir=work_dir,
        report_path=report_path,
        environment=environment,
    )


class _RunsRunner:
    def __init__(
        self,
        *,
        comparison: ExactComparison | ToleranceComparison | None,
        timeout: float,
        temporary_root: Path | None,
        parallel: bool | None,
        progress: bool | ProgressCallback | None,
    ) -> None:
        self.timeout = checked_timeout(timeout)
        checked_parallel(parallel)
        if comparison is not None and not isinstance(
            comparison, (ExactComparison, ToleranceComparison)
        ):
            raise TypeError("comparison must be explicit ExactComparison or ToleranceComparison")
        self.policy = comparison if comparison is not None else ExactComparison()
        self.temporary_root = Path(temporary_root) if temporary_root is not None else None
        self.parallel = parallel
        self.progress = ProgressReporter(progress)

    def run(
        self,
        case: str,
        variants: Mapping[str, Any] | None,
        *,
        cwd: Path | None,
        work_dir: Path | None,
        report_path: Path | None,
        environment: Mapping[str, str] | None,
    ) -> RunsResult:
        started = time.perf_counter()
        command_dir = Path(cwd).resolve() if cwd is not None else Path.cwd().resolve()
        fields: dict[str, Any] = {
            "case": case,
            "propagated_environment_keys": tuple(sorted(environment))
            if environment is not None
            else (),
            **policy_report_fields(self.policy),
        }
        try:
            loaded = load_runs_case(case)
            declared = _declared_variants(loaded, variants)
            environment_for_children = child_environment(case, environment)
        except Exception as error:
            result = RunsResult(
                outcome=Outcome.ERROR,
                message=f"runs case setup failed: {type(error).__name__}: {error}",
                timing_seconds={"total_wall": time.perf_counter() - started},
                environment=environment_fingerprint(),
                **fields,
            )
            return _finish(result, report_path)
        fields["variants"] = tuple(declared)
        fields["reference_variant"] = next(iter(declared))
        fields["variant_environment_keys"] = {
            name: tuple(sorted(variant.env)) for name, variant in declared.items()
        }
        fields["environment"] = environment_fingerprint(variables=environment_for_children)
        # SIGTERM/SIGHUP unwind like Ctrl-C: children killed, the run directory removed.
        with (
            terminating_signals_unwind(),
            run_directory(work_dir, self.temporary_root, RUNS_PREFIX) as (root, managed),
        ):
            settings = RunSettings(
                command_dir=command_dir,
                run_root=root,
                environment=environment_for_children,
                timeout=self.timeout,
                preserved=not managed,
                parallel=wants_parallel(self.parallel, getattr(loaded, "device", "cpu")),
                progress=self.progress,
            )
            execution = _RunsExecution(
                case_spec=case,
                case=loaded,
                variants=declared,
                policy=self.policy,
                settings=settings,
            )
            result = execution.run(fields, started)
        return _finish(result, report_path)


def _declared_variants(case: RunsCase, variants: Mapping[str, Any] | None) -> dict[str, RunVariant]:
    source = variants if variants is not None else getattr(case, "variants", None)
    if source is None:
        raise ValueError("give variants=... or declare a `variants` mapping on the case")
    if not isinstance(source, Mapping):
        raise TypeError(
            f"variants must be a mapping of name to variant, not {type(source).__name__}"
        )
    if len(source) < 2:
        raise ValueError(f"check_runs needs at least two variants, got {len(source)}")
    declared = {}
    for name, variant in source.items():
        if not isinstance(name, str) or not _VARIANT_NAME.fullmatch(name):
            raise ValueError(
                f"variant name {name!r} must be letters, digits, '_', '.' or '-' (it names a directory)"
            )
        declared[name] = RunVariant.of(name, variant)
    total = case.total_step
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise ValueError(f"total_step must be a positive int, got {total!r}")
    if not case.name:
        raise ValueError("case name must be non-empty")
    return declared


def _finish(result: RunsResult, report_path: Path | None) -> RunsResult:
    if report_path is not None:
        write_report(report_path, result.to_dict())
    return result


class _RunError(Exception):
    """A run could not run or be observed; carries the verdict to return."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


@dataclass
class _Run:
    """Book-keeping of one training child: variant `variant`, repeat `repeat`."""

    variant: str
    repeat: str
    run_dir: Path
    started: bool = False
    result: ChildResult | None = None
    error: _RunError | None = None

    @property
    def name(self) -> str:
        return f"{self.variant}_{self.repeat}"


class _RunsExecution:
    """One check's children, observations and decisions."""

    def __init__(
        self,
        *,
        case_spec: str,
        case: RunsCase,
        variants: dict[str, RunVariant],
        policy: ExactComparison | ToleranceComparison,
        settings: RunSettings,
    ) -> None:
        self.case = case
        self.variants = variants
        self.policy = policy
        self.settings = settings
        run_root = settings.run_root
        self.runs = {
            run.name: run
            for run in (
                _Run(variant, repeat, run_root / f"{variant}_{repeat}")
                for variant in variants
                for repeat in REPEATS
            )
        }
        self.group = ChildGroup(on_event=self._on_child_event)
        self.observer = ObserverClient(
            group=self.group,
            case_spec=case_spec,
            snapshot_dir=run_root / "snapshots",
            cwd=settings.command_dir,
            environment=settings.environment,
            timeout=settings.timeout,
            progress=settings.progress,
            case_kind="runs",
        )
        self.timings: dict[str, float] = {}
        self.processes: list[ExternalProcessEvidence] = []
        self.snapshot_ipc_bytes = 0
        self.checkpoint_max_bytes = 0

    def run(self, fields: dict[str, Any], started: float) -> RunsResult:
        with self.group:
            try:
                if self.settings.parallel:
                    self.observer.start()
                    for run in self.runs.values():
                        self._start(run)
                result = self._decide(fields)
            except _RunError as failure:
                result = self._result(fields, failure.outcome, failure.message)
            self.observer.stop()
        timing = dict(self.timings)
        timing["total_wall"] = time.perf_counter() - started
        run_walls = [timing[name] for name in self.runs if name in timing]
        if result.outcome in (Outcome.PASS, Outcome.FAIL) and run_walls:
            timing["longest_run"] = max(run_walls)
            if timing["longest_run"] > 0:
                timing["end_to_end_multiplier"] = timing["total_wall"] / timing["longest_run"]
        order = {name: index for index, name in enumerate(self.runs)}
        processes = tuple(sorted(self.processes, key=lambda evidence: order[evidence.phase]))
        return dataclasses.replace(result, timing_seconds=timing, processes=processes)

    # Decisions ------------------------------------------------------------------------

    def _decide(self, fields: dict[str, Any]) -> RunsResult:
        total = self.case.total_step
        snapshots: dict[str, Snapshot] = {}
        comparisons: list[VariantComparison] = []
        for variant in self.variants:
            first = self._observed(self.runs[f"{variant}_a"])
            second = self._observed(self.runs[f"{variant}_b"])
            differences = self._compared(f"self_{variant}", first, second)
            comparisons.append(_comparison(variant, variant, differences))
            if differences:
                return self._result(
                    fields,
                    Outcome.ABSTAIN,
                    f"variant {variant} is not self-consistent (its two runs differ at "
                    f"{differences[0].path}); agreement between variants cannot be judged",
                    first_divergent_step=total,
                    divergent_variant=variant,
                    primary_difference=differences[0],
                    all_differences=differences,
                    variant_comparisons=tuple(comparisons),
                    nondeterminism_hints=self._nondeterminism_hints(),
                )
            snapshots[variant] = first
        # Trajectories: once runs record per-step states (trainparity.record), the
        # recordings of each pair are compared step by step here, before the final
        # states, so that the FAIL names the first step at which the variants part.
        reference, *others = self.variants
        failing: tuple[str, tuple[Difference, ...]] | None = None
        for variant in others:
            differences = self._compared(
                f"{reference}_vs_{variant}", snapshots[reference], snapshots[variant]
            )
            comparisons.append(_comparison(variant, reference, differences))
            if differences and failing is None:
                failing = (variant, differences)
        if failing is not None:
            variant, differences = failing
            return self._result(
                fields,
                Outcome.FAIL,
                f"variants {reference} and {variant} first differ at step {total}: "
                f"{differences[0].path}",
                first_divergent_step=total,
                divergent_variant=variant,
                primary_difference=differences[0],
                all_differences=differences,
                variant_comparisons=tuple(comparisons),
            )
        wording = (
            "exactly equal"
            if isinstance(self.policy, ExactComparison)
            else "equal under the declared tolerance"
        )
        return self._result(
            fields,
            Outcome.PASS,
            f"all {len(self.variants)} variants end {wording} at step {total}",
            variant_comparisons=tuple(comparisons),
        )

    def _compared(
        self, key: str, baseline: Snapshot, candidate: Snapshot
    ) -> tuple[Difference, ...]:
        began = time.perf_counter()
        differences = tuple(self.policy.compare_all(baseline, candidate))
        self.timings[f"comparison_{key}"] = time.perf_counter() - began
        return differences

    def _result(
        self, fields: dict[str, Any], outcome: Outcome, message: str, **extra: Any
    ) -> RunsResult:
        return RunsResult(
            outcome=outcome,
            message=message,
            snapshot_ipc_bytes=self.snapshot_ipc_bytes,
            checkpoint_max_bytes=self.checkpoint_max_bytes,
            **fields,
            **extra,
        )

    def _nondeterminism_hints(self) -> tuple[str, ...]:
        return tuple(
            hint
            for variable, hint in _NONDETERMINISM_VARIABLES.items()
            if variable not in self.settings.environment
        )

    # Runs -----------------------------------------------------------------------------

    def _observed(self, run: _Run) -> Snapshot:
        checkpoint = self._trained(run)
        try:
            observation = self.observer.observe(run.name, checkpoint)
        except ObservationFailure as failure:
            raise _RunError(failure.outcome, failure.message) from None
        self.timings[f"snapshot_{run.name}"] = observation.seconds
        self.snapshot_ipc_bytes += observation.file_bytes
        return observation.snapshot

    def _trained(self, run: _Run) -> Path:
        if not run.started:
            self._start(run)
        if run.error is None:
            if run.result is None:
                self.group.wait_for(run.name)
            self._account(run)
        if run.error is not None:
            raise run.error
        return self._checkpoint_after(run)

    def _start(self, run: _Run) -> None:
        run.started = True
        run.run_dir.mkdir(parents=True, exist_ok=True)
        variant = self.variants[run.variant]
        plan = ProcessExecutionPlan(
            phase=run.name,
            cwd=self.settings.command_dir,
            run_dir=run.run_dir,
            end_step=self.case.total_step,
        )
        try:
            argv = [*_validated_command(self.case.command(plan)), *variant.args]
        except Exception as error:
            run.error = _RunError(
                Outcome.ERROR,
                f"{run.name} command callback or validation failed: {type(error).__name__}",
            )
            return
        try:
            spec = ChildSpec(
                name=run.name,
                argv=argv,
                cwd=self.settings.command_dir,
                env={**self.settings.environment, **variant.env},
                stdout_path=run.run_dir / "stdout.log",
                stderr_path=run.run_dir / "stderr.log",
            )
            self.group.start(spec, timeout=self.settings.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError):
            run.error = _RunError(
                Outcome.ERROR, self._hinted(run.name, f"{run.name} child launch failed")
            )

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        if name not in self.runs:
            return
        self.settings.progress.event(
            name, kind, result.wall_seconds if result is not None else None
        )
        if kind == "end":
            self.runs[name].result = result

    def _account(self, run: _Run) -> None:
        result = run.result
        if result.timed_out:
            run.error = _RunError(
                Outcome.ERROR, self._hinted(run.name, f"{run.name} child exceeded timeout")
            )
            return
        returncode = result.exit_code if result.exit_code is not None else -(result.signal or 0)
        self.processes.append(
            ExternalProcessEvidence(
                phase=run.name,
                pid=result.pid,
                elapsed_seconds=result.wall_seconds,
                returncode=returncode,
                signal=result.signal,
                user_seconds=result.user_seconds,
                system_seconds=result.sys_seconds,
                peak_rss_bytes=result.peak_rss_bytes,
            )
        )
        self.timings[run.name] = result.wall_seconds
        if returncode != 0:
            run.error = _RunError(
                Outcome.ERROR,
                self._hinted(run.name, f"{run.name} child exited with status {returncode}"),
            )

    def _checkpoint_after(self, run: _Run) -> Path:
        try:
            checkpoint = self.case.checkpoint_path(run.run_dir)
            if not isinstance(checkpoint, Path):
                raise TypeError(
                    f"checkpoint_path must return a pathlib.Path, got {type(checkpoint).__name__}"
                )
        except Exception as error:
            raise _RunError(
                Outcome.ERROR,
                f"{run.name} checkpoint path resolution after child completion failed: {type(error).__name__}",
            ) from None
        if not (checkpoint.is_file() or checkpoint.is_dir()):
            raise _RunError(
                Outcome.ERROR,
                self._hinted(run.name, f"{run.name} did not create its declared checkpoint"),
            )
        self.checkpoint_max_bytes = max(self.checkpoint_max_bytes, _path_bytes(checkpoint))
        return checkpoint

    def _hinted(self, name: str, message: str) -> str:
        if not self.settings.preserved:
            return message
        return f"{message}; see {name}/stderr.log under the preserved work_dir"


def _comparison(
    variant: str, reference: str, differences: Sequence[Difference]
) -> VariantComparison:
    first = differences[0] if differences else None
    return VariantComparison(
        variant=variant,
        reference=reference,
        outcome=Outcome.FAIL if differences else Outcome.PASS,
        difference_count=len(differences),
        first_path=first.path if first is not None else None,
        max_abs_error=max(
            (d.max_abs_error for d in differences if d.max_abs_error is not None), default=None
        ),
    )
