"""check_accumulation: one full-batch update vs a declared microbatch plan, each in a fresh process.

Three children (`baseline_a`, `baseline_b` with the one-microbatch baseline
plan, `candidate` with the declared plan) each build the case from the same
seed, record the initial state and five phases of one optimizer-update
boundary into one snapshot file, and publish a small JSON result. The parent
decides in the contract's order (CONTRACT §7.8): children in order, distinct
PIDs, initial states, then each phase — baseline self-consistency first
(else ABSTAIN), then baseline vs candidate (else FAIL). The children are
independent, so by default they run concurrently on CPU; the verdict is the
same either way.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from trainparity.accumulation_ranks import (
    RANK_FIELDS,
    RANKS_KEY,
    rank_differences,
    rank_names,
    rank_specs,
    validate_ranks,
)
from trainparity.accumulation_user_step import check_own_step_plan, has_train_step
from trainparity.comparison import Difference, ExactComparison, ToleranceComparison
from trainparity.environment import environment_fingerprint
from trainparity.error_text import error_text
from trainparity.importing import load_accumulation_case
from trainparity.outcomes import Outcome
from trainparity.processes import ChildGroup, ChildLaunchError, ChildResult, ChildSpec
from trainparity.progress import ProgressCallback, ProgressReporter
from trainparity.reports import report_text, write_report
from trainparity.results import AccumulationResult
from trainparity.run_setup import checked_parallel, checked_timeout, run_root, wants_parallel
from trainparity.snapshot import Snapshot
from trainparity.snapshot_file import SnapshotFileError, read_snapshot

__all__ = [
    "CHILD_NAMES",
    "PHASES",
    "AccumulationExecutionPlan",
    "AccumulationRunner",
    "UnsafeBatchSplit",
    "check_accumulation",
    "split_tensor_tree",
]

PHASES = ("loss_accounting", "gradient", "optimizer_state", "parameter_update", "scheduler_state")
"""The observed phases of one optimizer-update boundary, in comparison order."""

CHILD_NAMES = ("baseline_a", "baseline_b", "candidate")
INITIAL_STATE = "initial_state"
RESULT_FILE = "result.json"
OBSERVATIONS_FILE = "observations.safetensors"
INITIAL_KEY = "initial"

_PASS_MESSAGE = "declared executions are equivalent for one optimizer-update boundary"
_REPORT_FIXPOINT_ROUNDS = 8
_STDERR_TAIL_CHARACTERS = 300


# The execution plan ---------------------------------------------------------------------


@dataclass(frozen=True)
class AccumulationExecutionPlan:
    """How the candidate executes one optimizer-update boundary (CONTRACT §7.3).

    The defaults describe correct accumulation; each flag turns on one
    well-known mistake so that a check can show where it is first observed.
    """

    microbatch_count: int
    scale_accumulated_loss: bool = True
    use_explicit_loss_accounting: bool = True
    optimizer_step_per_microbatch: bool = False
    scheduler_step_per_microbatch: bool = False
    zero_grad_before_gradient_observation: bool = False
    clip_grad_norm: float | None = None
    clip_per_microbatch: bool = False
    amp_step_before_unscale: bool = False
    omit_final_microbatch: bool = False
    # Several ranks (beyond CONTRACT §7.3; see accumulation_ranks): the candidate runs as
    # `world_size` processes under DDP, each on its contiguous share of the microbatches.
    world_size: int = 1
    no_sync_backward_only: bool = False
    sync_first_microbatch: bool = False
    clip_before_sync: bool = False
    per_rank_loss_normalization: bool = False

    def validate(self) -> None:
        """Raise ValueError for values no execution can honour, TypeError for wrong field types.

        ValueError: microbatch_count < 1, clip_grad_norm <= 0 or NaN, clip_per_microbatch
        without clip_grad_norm.
        """
        count = self.microbatch_count
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"microbatch_count must be an int, got {type(count).__name__}")
        if count < 1:
            raise ValueError("microbatch_count must be positive")
        for flag in _FLAG_NAMES:
            value = getattr(self, flag)
            if not isinstance(value, bool):
                raise TypeError(f"{flag} must be a bool, got {type(value).__name__}")
        norm = self.clip_grad_norm
        if norm is not None:
            if isinstance(norm, bool) or not isinstance(norm, (int, float)):
                raise TypeError(
                    f"clip_grad_norm must be a number or None, got {type(norm).__name__}"
                )
            if math.isnan(norm) or norm <= 0:
                raise ValueError("clip_grad_norm must be positive")
        elif self.clip_per_microbatch:
            # Without a norm the flag would silently do nothing.
            raise ValueError("clip_per_microbatch needs clip_grad_norm")
        validate_ranks(self)

    def to_dict(self) -> dict[str, Any]:
        """The ten fields of CONTRACT §7.3 by name, plus each multi-rank field not at its default.

        A single-rank plan therefore has exactly the contract's ten keys.
        """
        return {
            field.name: getattr(self, field.name)
            for field in dataclasses.fields(self)
            if field.name not in RANK_FIELDS or getattr(self, field.name) != field.default
        }

    @classmethod
    def from_dict(cls, mapping: Mapping[str, Any]) -> AccumulationExecutionPlan:
        """Rebuild and validate a plan from the ten field names (multi-rank fields optional)."""
        if not isinstance(mapping, Mapping):
            raise TypeError(f"plan must be a mapping, got {type(mapping).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        expected = known - set(RANK_FIELDS)
        missing = sorted(expected - set(mapping))
        unexpected = sorted(set(mapping) - known, key=str)
        if missing or unexpected:
            raise ValueError(
                f"plan must have exactly the fields {sorted(expected)}; "
                f"missing {missing}, unexpected {unexpected}"
            )
        plan = cls(**mapping)
        plan.validate()
        return plan


_FLAG_NAMES = tuple(
    field.name
    for field in dataclasses.fields(AccumulationExecutionPlan)
    if field.name not in ("microbatch_count", "clip_grad_norm", "world_size")
)


# Batch splitting ------------------------------------------------------------------------


class UnsafeBatchSplit(ValueError):
    """The batch cannot be split into microbatches without guessing (the check ABSTAINs)."""


def split_tensor_tree(batch: object, parts: int) -> list[object]:
    """Split a tree of tensors along dim 0 into `parts` contiguous, ordered microbatches.

    Accepts tensors with a batch dimension, non-empty str-keyed mappings and
    non-empty lists/tuples of them; every tensor leaf must have the same
    non-zero leading length, at least `parts`. Sizes follow
    `torch.tensor_split` (differ by at most one, earlier parts larger).
    Mappings are rebuilt as dicts, lists as lists, tuples as tuples (named
    tuples keep their type). Raises UnsafeBatchSplit otherwise.
    """
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
        raise UnsafeBatchSplit("parts must be positive")
    lengths: list[int] = []
    _collect_lengths(batch, lengths)
    if not lengths or len(set(lengths)) != 1 or lengths[0] == 0:
        raise UnsafeBatchSplit("tensor leaves must have one equal non-zero leading length")
    length = lengths[0]
    if length < parts:
        raise UnsafeBatchSplit("microbatch count exceeds batch length")
    ranges = torch.tensor_split(torch.arange(length), parts)
    return [_take(batch, indices) for indices in ranges]


def _collect_lengths(value: object, lengths: list[int]) -> None:
    if isinstance(value, torch.Tensor):
        if value.dim() == 0:
            raise UnsafeBatchSplit("scalar tensor leaf has no batch dimension")
        lengths.append(int(value.shape[0]))
    elif isinstance(value, Mapping):
        if not value or not all(isinstance(key, str) for key in value):
            raise UnsafeBatchSplit("mapping leaves must be non-empty and string-keyed")
        for item in value.values():
            _collect_lengths(item, lengths)
    elif isinstance(value, (list, tuple)):
        if not value:
            raise UnsafeBatchSplit("sequence batch must be non-empty")
        for item in value:
            _collect_lengths(item, lengths)
    else:
        raise UnsafeBatchSplit(f"unsupported batch leaf: {type(value).__name__}")


def _take(value: object, indices: torch.Tensor) -> object:
    if isinstance(value, torch.Tensor):
        # A gathered copy (not a view): each microbatch is a fresh, aligned tensor.
        return value.index_select(0, indices.to(value.device))
    if isinstance(value, Mapping):
        return {key: _take(item, indices) for key, item in value.items()}
    items = [_take(item, indices) for item in value]  # type: ignore[attr-defined]
    if isinstance(value, tuple):
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return items


def split_for_case(case: object, batch: object, count: int) -> list[object]:
    """The case's own `split_batch(batch, count)` when it has one, else split_tensor_tree."""
    splitter = getattr(case, "split_batch", None)
    if not callable(splitter):
        return split_tensor_tree(batch, count)
    parts = splitter(batch, count)
    if isinstance(parts, (str, bytes)) or not isinstance(parts, Sequence):
        raise UnsafeBatchSplit("explicit splitter must return an ordered sequence")
    if len(parts) != count:
        raise UnsafeBatchSplit("explicit splitter returned the wrong microbatch count")
    return list(parts)


# The check ----------------------------------------------------------------------------


def check_accumulation(
    case: str,
    *,
    candidate: AccumulationExecutionPlan,
    comparison: ExactComparison | ToleranceComparison | None = None,
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
) -> AccumulationResult:
    """Check that `candidate` gives the same update as one full batch, at one optimizer boundary.

    `case` is an importable "package.module:ClassName" implementing
    AccumulationCase. Three fresh processes run the baseline twice and the
    candidate once on `device` from `seed`; FAIL names the first observed
    phase and path (e.g. `loss_accounting.denominator`). `timeout` applies to
    each child. `work_dir` keeps each child's directory (logs, result,
    observations) instead of a temporary one. `parallel=None` runs the
    children concurrently unless `device` is CUDA. `progress=True` prints
    child start/end lines to stderr; a callable receives ProgressEvents.
    """
    runner = AccumulationRunner(
        comparison=comparison if comparison is not None else ExactComparison(),
        timeout=timeout,
        temporary_root=temporary_root,
        parallel=parallel,
        progress=progress,
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


class AccumulationRunner:
    """Runs accumulation checks; the internal object behind check_accumulation (CONTRACT §1.4)."""

    def __init__(
        self,
        *,
        comparison: ExactComparison | ToleranceComparison,
        timeout: float = 300.0,
        temporary_root: Path | None = None,
        parallel: bool | None = None,
        progress: bool | ProgressCallback | None = None,
    ) -> None:
        if not isinstance(comparison, (ExactComparison, ToleranceComparison)):
            raise TypeError("comparison must be explicit ExactComparison or ToleranceComparison")
        timeout = checked_timeout(timeout)
        checked_parallel(parallel)
        self.policy = comparison
        self.timeout = float(timeout)
        self.temporary_root = Path(temporary_root) if temporary_root is not None else None
        self.parallel = parallel
        self.progress = ProgressReporter(progress)

    def run(
        self,
        case: str,
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
        try:
            candidate.validate()  # a TypeError (wrong field type) is raised to the caller
        except ValueError as error:
            return self._finish(_setup_error(case, policy_name, error), report_path)
        try:
            loaded = load_accumulation_case(case)
            equivalence = declared_equivalence(loaded)
            own_step = has_train_step(loaded)
            if own_step:
                check_own_step_plan(candidate)
        except Exception as error:  # importing runs the user's module: anything can fail
            return self._finish(_setup_error(case, policy_name, error), report_path)
        root, managed = run_root(work_dir, self.temporary_root, "trainparity-accum-")
        try:
            execution = _AccumulationExecution(
                case_spec=case,
                plans={"baseline_a": baseline, "baseline_b": baseline, "candidate": candidate},
                device=device,
                seed=seed,
                command_dir=Path(cwd) if cwd is not None else Path.cwd(),
                run_root=root,
                environment=environment,
                timeout=self.timeout,
                preserved=not managed,
                parallel=wants_parallel(self.parallel, device),
                progress=self.progress,
                policy=self.policy,
                own_step=own_step,
            )
            verdict = execution.run()
        finally:
            if managed:
                shutil.rmtree(root, ignore_errors=True)
        result = AccumulationResult(
            case=case,
            equivalence=equivalence,
            comparison_policy=policy_name,
            peak_temporary_directory_bytes=execution.peak_bytes,
            environment=environment_fingerprint(
                variables={**os.environ, **dict(environment or {})}
            ),
            **verdict,
        )
        return self._finish(result, report_path)

    @staticmethod
    def _finish(result: AccumulationResult, report_path: Path | None) -> AccumulationResult:
        if report_path is None:
            return result
        return write_accumulation_report(result, Path(report_path))


def declared_equivalence(case: object) -> str:
    """The case's declared equivalence relation: a non-empty str."""
    equivalence = case.equivalence  # type: ignore[attr-defined]
    if not isinstance(equivalence, str):
        raise TypeError(
            f"case equivalence must be a str describing the declared relation, got {type(equivalence).__name__}"
        )
    if not equivalence.strip():
        raise ValueError("case must declare a non-empty equivalence relation")
    return equivalence


def _setup_error(case: str, policy_name: str, error: Exception) -> AccumulationResult:
    return AccumulationResult(
        outcome=Outcome.ERROR,
        message=f"case setup failed: {error_text(error)}",
        case=case,
        equivalence="",
        comparison_policy=policy_name,
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


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass  # a temporary file renamed away between listing and stat
    return total


class _Verdict(Exception):
    """Ends the decision sequence with a verdict (fields of AccumulationResult)."""

    def __init__(self, outcome: Outcome, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.fields = {"outcome": outcome, "message": message, **fields}


@dataclass(frozen=True)
class _ChildReport:
    """What one child published: its verdict and, on PASS, its observations."""

    name: str
    pid: int
    outcome: Outcome
    message: str
    loss_normalization_captured: bool = False
    observations: Snapshot | None = None
    unobserved_phases: tuple[str, ...] = ()


class _AccumulationExecution:
    """One check's three children and the decisions taken from what they observed."""

    def __init__(
        self,
        *,
        case_spec: str,
        plans: dict[str, AccumulationExecutionPlan],
        device: str,
        seed: int,
        command_dir: Path,
        run_root: Path,
        environment: Mapping[str, str] | None,
        timeout: float,
        preserved: bool,
        parallel: bool,
        progress: ProgressReporter,
        policy: ExactComparison | ToleranceComparison,
        own_step: bool = False,
    ) -> None:
        self.case_spec = case_spec
        self.plans = plans
        self.device = device
        self.seed = seed
        self.command_dir = command_dir
        self.run_root = run_root
        self.environment = environment
        self.timeout = timeout
        self.preserved = preserved
        self.parallel = parallel
        self.progress = progress
        self.policy = policy
        # The candidate of a case with its own train_step runs that step (accumulation_user_step).
        self.own_step_children = {"candidate"} if own_step else set()
        self.group = ChildGroup(on_event=self._on_child_event)
        self.launch_errors: dict[str, str] = {}
        self.rank_reports: list[_ChildReport] = []  # every rank's, for a multi-rank candidate
        self.rank_pids: list[tuple[str, int]] = []
        self.peak_bytes = 0
        self.process_ids: list[int] = []

    def run(self) -> dict[str, Any]:
        with self.group:
            try:
                if self.parallel:
                    for name in CHILD_NAMES:
                        self._start(name)
                reports = [self._report(name) for name in CHILD_NAMES]
            except _Verdict as verdict:
                return {"process_ids": tuple(self.process_ids), **verdict.fields}
        captured = all(report.loss_normalization_captured for report in reports)
        try:
            fields = self._decide(reports)
        except _Verdict as verdict:
            fields = verdict.fields
        return {
            "process_ids": tuple(self.process_ids),
            "loss_normalization_captured": captured,
            **fields,
        }

    # Children ---------------------------------------------------------------------------

    def _start(self, name: str) -> None:
        directory = self.run_root / name
        directory.mkdir(parents=True, exist_ok=True)
        for stale in (RESULT_FILE, OBSERVATIONS_FILE):  # a reused work_dir must not answer for us
            (directory / stale).unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "trainparity.accumulation_worker",
            "--case",
            self.case_spec,
            "--plan",
            json.dumps(self.plans[name].to_dict(), sort_keys=True),
            "--device",
            self.device,
            "--seed",
            str(self.seed),
            "--result",
            str(directory / RESULT_FILE),
            "--observations",
            str(directory / OBSERVATIONS_FILE),
        ]
        if name in self.own_step_children:
            argv.append("--own-step")
        try:
            environment = dict(os.environ)
            environment.update(self.environment or {})
            world_size = self.plans[name].world_size
            if world_size > 1:
                for rank in rank_specs(
                    name,
                    argv,
                    cwd=self.command_dir,
                    environment=environment,
                    directory=directory,
                    world_size=world_size,
                ):
                    self.rank_pids.append((rank.name, self.group.start(rank, timeout=self.timeout)))
                return
            spec = ChildSpec(
                name=name,
                argv=argv,
                cwd=self.command_dir,
                env=environment,
                stdout_path=directory / "stdout.log",
                stderr_path=directory / "stderr.log",
            )
            self.group.start(spec, timeout=self.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError) as error:
            self.launch_errors[name] = f"worker launch failed ({name}): {error_text(error)}"

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        self.progress.event(name, kind, result.wall_seconds if result is not None else None)
        if kind == "end":
            self.peak_bytes = max(self.peak_bytes, _tree_bytes(self.run_root))

    def _report(self, name: str) -> _ChildReport:
        """Wait for child `name` and read what it published; raise _Verdict unless PASS."""
        if not self.parallel:
            self._start(name)
        if name in self.launch_errors:
            raise _Verdict(Outcome.ERROR, self.launch_errors[name])
        if self.plans[name].world_size > 1:
            return self._report_ranks(name)
        result = self.group.wait_for(name)
        assert result is not None  # wait_for without a timeout returns once reaped
        self.process_ids.append(result.pid)
        directory = self.run_root / name
        if result.timed_out:
            raise _Verdict(
                Outcome.ERROR,
                self._with_logs(name, f"worker timeout ({name} ran past {self.timeout:g} s)"),
            )
        status = (
            f"exited with status {result.exit_code}"
            if result.exit_code is not None
            else f"was killed by signal {result.signal}"
        )
        result_path = directory / RESULT_FILE
        if result.exit_code != 0 or not result_path.is_file():
            raise _Verdict(
                Outcome.ERROR,
                self._with_logs(name, f"worker did not publish a result ({name} {status})"),
            )
        report = self._read_result(name, result_path)
        if report.outcome is Outcome.ERROR and name in self.own_step_children:
            # The user's own step failed: its traceback is in the child's stderr.
            raise _Verdict(report.outcome, self._with_logs(name, report.message))
        if report.outcome is not Outcome.PASS:
            raise _Verdict(report.outcome, report.message)
        return report

    def _report_ranks(self, name: str) -> _ChildReport:
        """Wait for every rank of `name`; the first that fails stops the others (ERROR).

        A rank that crashed leaves the others blocked in a collective until
        their timeout, so they are terminated as soon as one rank has failed.
        Returns rank 0's report; all ranks' reports are kept for the rank check.
        """
        names = rank_names(name, self.plans[name].world_size)
        seen: set[str] = set()
        while len(seen) < len(names):
            failures = []
            for rank in names:
                result = self.group.result(rank)
                if result is None or rank in seen:
                    continue
                seen.add(rank)
                self.process_ids.append(result.pid)
                failure = self._rank_failure(rank, result)
                if failure is not None:
                    failures.append((result.succeeded, failure))
            if failures:
                for rank in names:
                    self.group.terminate(rank)
                # The terminated ranks ran too; list them, so nothing is hidden.
                self.process_ids.extend(pid for rank, pid in self.rank_pids if rank not in seen)
                # Ranks reaped together: a crash or timeout explains the others' errors
                # (a peer that vanished mid-collective), not the other way round.
                raise _Verdict(*min(failures, key=lambda failure: failure[0])[1])
            if len(seen) < len(names):
                self.group.wait(None)
        self.rank_reports = [self._read_result(rank, self._rank_result(rank)) for rank in names]
        return dataclasses.replace(self.rank_reports[0], name=name)

    def _rank_result(self, rank: str) -> Path:
        return self.run_root / self._log_directory(rank) / RESULT_FILE

    def _rank_failure(self, rank: str, result: ChildResult) -> tuple[Outcome, str] | None:
        if result.timed_out:
            return Outcome.ERROR, self._with_logs(
                rank, f"worker timeout ({rank} ran past {self.timeout:g} s)"
            )
        path = self._rank_result(rank)
        if result.exit_code != 0 or not path.is_file():
            status = (
                f"exited with status {result.exit_code}"
                if result.exit_code is not None
                else f"was killed by signal {result.signal}"
            )
            return Outcome.ERROR, self._with_logs(
                rank, f"worker did not publish a result ({rank} {status})"
            )
        report = self._read_result(rank, path)
        if report.outcome is Outcome.PASS:
            return None
        message = report.message if rank in report.message else f"{report.message} ({rank})"
        if report.outcome is Outcome.ERROR:
            return Outcome.ERROR, self._with_logs(rank, message)
        return report.outcome, message

    def _log_directory(self, name: str) -> str:
        """`candidate/rank1` for rank children, else the child's own name."""
        owner, _, rank = name.partition(".")
        return f"{owner}/{rank}" if rank else name

    def _read_result(self, name: str, path: Path) -> _ChildReport:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            outcome = Outcome(record["outcome"])
            message = record["message"]
            pid = record["pid"]
            if not isinstance(message, str) or isinstance(pid, bool) or not isinstance(pid, int):
                raise TypeError("message must be a str and pid an int")
            if outcome is not Outcome.PASS:
                return _ChildReport(name, pid, outcome, message)
            captured = record["loss_normalization_captured"]
            if not isinstance(captured, bool):
                raise TypeError("loss_normalization_captured must be a bool")
            unobserved = tuple(record.get("unobserved_phases", ()))
            if not set(unobserved) <= {"loss_accounting"}:
                raise ValueError(f"unexpected unobserved phases {unobserved!r}")
            observations, _ = read_snapshot(path.parent / OBSERVATIONS_FILE)
        except (OSError, ValueError, KeyError, TypeError, SnapshotFileError) as error:
            raise _Verdict(
                Outcome.ERROR,
                self._with_logs(name, f"worker result was corrupt ({name}: {error_text(error)})"),
            ) from None
        return _ChildReport(name, pid, outcome, message, captured, observations, unobserved)

    def _with_logs(self, name: str, message: str) -> str:
        directory = self._log_directory(name)
        if self.preserved:
            return f"{message}; see {directory}/stderr.log under the preserved work_dir"
        tail = _last_line(self.run_root / directory / "stderr.log")
        return f"{message}; last stderr line: {tail}" if tail else message

    # Decisions --------------------------------------------------------------------------

    def _decide(self, reports: list[_ChildReport]) -> dict[str, Any]:
        reports_with_ranks = [*reports[:-1], *(self.rank_reports or reports[-1:])]
        if len({report.pid for report in reports_with_ranks}) != len(reports_with_ranks):
            raise _Verdict(Outcome.ERROR, "fresh executions did not have distinct process IDs")
        self.progress.event("comparison", "start")
        began = time.perf_counter()
        try:
            self._compare(
                [_phase_views(report) for report in reports],
                [_phase_views(report) for report in self.rank_reports],
            )
        finally:
            self.progress.event("comparison", "end", time.perf_counter() - began)
        return {
            "outcome": Outcome.PASS,
            "message": _PASS_MESSAGE,
            "verified_equal_initial_state": True,
        }

    def _compare(
        self, views: list[dict[str, Snapshot]], rank_views: list[dict[str, Snapshot]]
    ) -> None:
        """Raise the first ABSTAIN or FAIL verdict in contract order; return when all agree.

        A multi-rank candidate's ranks must agree with each other (phase
        `ranks`) before rank 0 is compared with the reference.
        """
        baseline_a, baseline_b, candidate = views
        self._judge_initial(baseline_a[INITIAL_KEY], baseline_b[INITIAL_KEY], candidate)
        disagreement = rank_differences(self.policy, rank_views) if rank_views else None
        if disagreement is not None:
            message, differences = disagreement
            raise _Verdict(
                Outcome.FAIL, message, **_differences("ranks", differences, verified=True)
            )
        for phase in PHASES:
            if phase not in candidate:  # an own step that did not report its losses
                continue
            differences = self.policy.compare_all(baseline_a[phase], baseline_b[phase])
            if differences:
                raise _Verdict(
                    Outcome.ABSTAIN,
                    "baseline self-consistency failed",
                    **_differences(phase, differences, verified=True),
                )
            differences = self.policy.compare_all(baseline_a[phase], candidate[phase])
            if differences:
                raise _Verdict(
                    Outcome.FAIL,
                    f"first observed divergence in {phase}; not a root-cause claim",
                    **_differences(phase, differences, verified=True),
                )

    def _judge_initial(
        self, baseline_a: Snapshot, baseline_b: Snapshot, candidate: dict[str, Snapshot]
    ) -> None:
        for other, message in (
            (baseline_b, "baseline initial-state self-consistency failed"),
            (candidate[INITIAL_KEY], "candidate did not start from verified-equal initial state"),
        ):
            differences = self.policy.compare_all(baseline_a, other)
            if differences:
                raise _Verdict(
                    Outcome.ABSTAIN,
                    message,
                    **_differences(INITIAL_STATE, differences, verified=False),
                )


def _differences(
    phase: str, differences: tuple[Difference, ...], *, verified: bool
) -> dict[str, Any]:
    return {
        "first_observed_phase": phase,
        "primary_difference": differences[0],
        "all_differences": differences,
        "verified_equal_initial_state": verified,
    }


def _phase_views(report: _ChildReport) -> dict[str, Snapshot]:
    """Per-phase snapshots of one child's observation file: initial at step 0, phases after."""
    observations = report.observations
    assert observations is not None
    subtrees = observations.state.as_dict()
    observed = [phase for phase in PHASES if phase not in report.unobserved_phases]
    missing = [key for key in (INITIAL_KEY, *observed) if key not in subtrees]
    if missing:
        raise _Verdict(
            Outcome.ERROR,
            f"worker result was corrupt ({report.name}: observations lack {', '.join(missing)})",
        )
    views = {INITIAL_KEY: Snapshot(0, subtrees[INITIAL_KEY], observations.backend)}
    for phase in (*observed, RANKS_KEY) if RANKS_KEY in subtrees else observed:
        views[phase] = Snapshot(observations.step, subtrees[phase], observations.backend)
    return views


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as stream:
            stream.seek(max(0, os.fstat(stream.fileno()).st_size - 4096))
            lines = stream.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if line.strip():
            return line.strip()[:_STDERR_TAIL_CHARACTERS]
    return ""
