"""One accumulation check's children: started, awaited, and read for accumulation_verdict to judge.

A child that fails is worded as a training phase of check_resume or
check_runs is (processes/failure_text.py): how it ended, its exception line,
its stderr's last lines and where its full log is.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.accumulation.noise_verdict import judge_noise_observations
from trainparity._internal.accumulation.plan import (
    INITIAL_KEY,
    PHASES,
    RANKS_KEY,
    AccumulationExecutionPlan,
)
from trainparity._internal.accumulation.rank_orchestration import rank_names, rank_specs
from trainparity._internal.accumulation.step_facts import read_with_step_facts
from trainparity._internal.accumulation.verdict import (
    Decision,
    judge_observations,
)
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import ExactComparison, ToleranceComparison
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.processes.check_runner import RunSettings
from trainparity._internal.processes.failure_text import (
    directory_listing,
    exit_message,
    explained_failure,
    shown_path,
    timeout_message,
)
from trainparity._internal.processes.group import (
    ChildGroup,
    ChildLaunchError,
    ChildResult,
    ChildSpec,
)
from trainparity._internal.state.freeze import FrozenMapping, FrozenTensor
from trainparity._internal.state.snapshot import Snapshot
from trainparity._internal.state.snapshot_file import read_snapshot
from trainparity._internal.state.tree_codec import SnapshotFileError

__all__ = ["CHILD_NAMES", "SPLIT_REFERENCE", "AccumulationExecution"]

CHILD_NAMES = ("baseline_a", "baseline_b", "candidate")  # under NoiseComparison: more baselines
SPLIT_REFERENCE = "split_reference"  # NoiseComparison's reference over the candidate's microbatches
RESULT_FILE = "result.json"
OBSERVATIONS_FILE = "observations.safetensors"


def _tree_bytes(root: Path) -> int:
    total = 0
    for directory, _, files in os.walk(root):
        for name in files:
            try:
                total += os.lstat(os.path.join(directory, name)).st_size
            except OSError:
                pass  # a temporary file renamed away between listing and stat
    return total


@dataclass(frozen=True)
class _WorkerReport:
    """What one worker published: its verdict and, on PASS, its observations."""

    name: str
    pid: int
    outcome: Outcome
    message: str
    loss_normalization_captured: bool = False
    observations: Snapshot | None = None
    unobserved_phases: tuple[str, ...] = ()
    random_draws: Mapping[str, object] = dataclasses.field(default_factory=dict)


class AccumulationExecution:
    """One check's children, run and read, and the verdict judged from what they observed."""

    def __init__(
        self,
        *,
        case_spec: str,
        plans: dict[str, AccumulationExecutionPlan],
        device: str,
        seed: int,
        settings: RunSettings,
        policy: ExactComparison | ToleranceComparison | NoiseComparison,
        own_step: bool = False,
    ) -> None:
        self.case_spec = case_spec
        self.plans = plans
        self.child_names = tuple(plans)  # the baselines, then "candidate"
        self.device = device
        self.seed = seed
        self.settings = settings
        self.policy = policy
        # The candidate of a case with its own train_step runs that step (accumulation_user_step).
        self.own_step_children = {"candidate"} if own_step else set()
        self.group = ChildGroup(on_event=self._on_child_event, launcher=settings.starter.launch)
        self.launch_errors: dict[str, str] = {}
        self.rank_reports: list[_WorkerReport] = []  # every rank's, for a multi-rank candidate
        self.rank_pids: list[tuple[str, int]] = []
        self.peak_bytes = 0
        self.process_ids: list[int] = []
        self.thread_details: dict[str, str] = {}  # each child's threads, for its progress line

    def run(self) -> Decision:
        with self.group:
            if self.settings.parallel:
                for name in self.child_names:
                    self._start(name)
            reports = []
            for name in self.child_names:
                report = self._report(name)
                if isinstance(report, Decision):
                    return dataclasses.replace(report, process_ids=tuple(self.process_ids))
                reports.append(report)
        decision = self._with_step_facts(self._decide(reports), reports)
        return dataclasses.replace(
            decision,
            process_ids=tuple(self.process_ids),
            loss_normalization_captured=all(
                report.loss_normalization_captured for report in reports
            ),
        )

    # Children ---------------------------------------------------------------------------

    def _start(self, name: str) -> None:
        directory = self.settings.run_root / name
        directory.mkdir(parents=True, exist_ok=True)
        for stale in (RESULT_FILE, OBSERVATIONS_FILE):  # a reused work_dir must not answer for us
            (directory / stale).unlink(missing_ok=True)
        argv = [
            sys.executable,
            "-m",
            "trainparity._internal.accumulation.worker",
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
            world_size = self.plans[name].world_size
            if world_size > 1:
                threads = self.settings.threads
                for rank in rank_specs(
                    name,
                    argv,
                    cwd=self.settings.command_dir,
                    environment=threads.environment(self.settings.environment, ranks=world_size),
                    directory=directory,
                    world_size=world_size,
                ):
                    self.thread_details[rank.name] = threads.describe(world_size)
                    started = self.group.start(rank, timeout=self.settings.timeout)
                    self.rank_pids.append((rank.name, started))
                return
            spec = ChildSpec(
                name=name,
                argv=argv,
                cwd=self.settings.command_dir,
                env=self.settings.environment,
                stdout_path=directory / "stdout.log",
                stderr_path=directory / "stderr.log",
            )
            self.thread_details[name] = self.settings.threads.describe()
            self.group.start(spec, timeout=self.settings.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError) as error:
            self.launch_errors[name] = f"{name} child launch failed: {error_text(error)}"

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        self.settings.progress.event(
            name,
            kind,
            result.wall_seconds if result is not None else None,
            detail=self.thread_details.get(name) if kind == "start" else None,
        )
        if kind == "end":
            self.peak_bytes = max(self.peak_bytes, _tree_bytes(self.settings.run_root))

    def _report(self, name: str) -> _WorkerReport | Decision:
        """Wait for child `name` and read what it published; a Decision unless it passed."""
        if not self.settings.parallel:
            self._start(name)
        if name in self.launch_errors:
            return Decision(Outcome.ERROR, self.launch_errors[name])
        if self.plans[name].world_size > 1:
            return self._report_ranks(name)
        result = self.group.wait_for(name)
        assert result is not None  # wait_for without a timeout returns once reaped
        self.process_ids.append(result.pid)
        failure = self._failure(name, result)
        if failure is not None:
            return failure
        report = self._read_result(name, self.settings.run_root / name / RESULT_FILE)
        if isinstance(report, Decision) or report.outcome is Outcome.PASS:
            return report
        if report.outcome is Outcome.ERROR and name in self.own_step_children:
            # The user's own step failed: its traceback is in the child's stderr.
            return Decision(report.outcome, self._explained(name, report.message))
        return Decision(report.outcome, report.message)

    def _report_ranks(self, name: str) -> _WorkerReport | Decision:
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
                return min(failures, key=lambda failure: failure[0])[1]
            if len(seen) < len(names):
                self.group.wait(None)
        reports = [self._read_result(rank, self._rank_result(rank)) for rank in names]
        for report in reports:
            if isinstance(report, Decision):
                return report
        self.rank_reports = [report for report in reports if isinstance(report, _WorkerReport)]
        return dataclasses.replace(self.rank_reports[0], name=name)

    def _rank_result(self, rank: str) -> Path:
        return self.settings.run_root / self._log_directory(rank) / RESULT_FILE

    def _rank_failure(self, rank: str, result: ChildResult) -> Decision | None:
        failure = self._failure(rank, result)
        if failure is not None:
            return failure
        report = self._read_result(rank, self._rank_result(rank))
        if isinstance(report, Decision):
            return report
        if report.outcome is Outcome.PASS:
            return None
        message = report.message if rank in report.message else f"{report.message} ({rank})"
        if report.outcome is Outcome.ERROR:
            return Decision(Outcome.ERROR, self._explained(rank, message))
        return Decision(report.outcome, message)

    def _failure(self, name: str, result: ChildResult) -> Decision | None:
        """ERROR, as a training phase's: a child that timed out, failed, or published no result."""
        if result.timed_out:
            message = self._explained(name, timeout_message(name), with_reason=False)
            return Decision(Outcome.ERROR, message)
        if result.returncode != 0:
            message = self._explained(name, exit_message(name, result.returncode))
            return Decision(Outcome.ERROR, message)
        directory = self.settings.run_root / self._log_directory(name)
        if (directory / RESULT_FILE).is_file():
            return None
        message = (
            f"{name} did not publish its result {self._shown(directory / RESULT_FILE)}; "
            f"the directory {self._shown(directory)} held: {directory_listing(directory)}"
        )
        return Decision(Outcome.ERROR, self._explained(name, message))

    def _log_directory(self, name: str) -> str:
        """`candidate/rank1` for rank children, else the child's own name."""
        owner, _, rank = name.partition(".")
        return f"{owner}/{rank}" if rank else name

    def _read_result(self, name: str, path: Path) -> _WorkerReport | Decision:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            outcome = Outcome(record["outcome"])
            message = record["message"]
            pid = record["pid"]
            if not isinstance(message, str) or isinstance(pid, bool) or not isinstance(pid, int):
                raise TypeError("message must be a str and pid an int")
            if outcome is not Outcome.PASS:
                return _WorkerReport(name, pid, outcome, message)
            captured = record["loss_normalization_captured"]
            if not isinstance(captured, bool):
                raise TypeError("loss_normalization_captured must be a bool")
            unobserved = tuple(record.get("unobserved_phases", ()))
            if not set(unobserved) <= {"loss_accounting"}:
                raise ValueError(f"unexpected unobserved phases {unobserved!r}")
            draws = record.get("random_draws", {})
            if not isinstance(draws, dict):
                raise TypeError("random_draws must be a mapping")
            observations, extras = read_snapshot(path.parent / OBSERVATIONS_FILE)
        except (OSError, ValueError, KeyError, TypeError, SnapshotFileError) as error:
            message = f"{name}'s result was corrupt: {error_text(error)}"
            return Decision(Outcome.ERROR, self._explained(name, message))
        # A warm check's process has no torch of its own: the report's torch facts are a worker's.
        self.settings.observed_environment(extras.get("environment"))
        return _WorkerReport(name, pid, outcome, message, captured, observations, unobserved, draws)

    def _explained(self, name: str, message: str, *, with_reason: bool = True) -> str:
        """`message` and the last lines of child `name`'s stderr, read before its directory goes."""
        log = self.settings.run_root / self._log_directory(name) / "stderr.log"
        return explained_failure(
            message,
            f"{name}'s stderr",
            log,
            kept=self.settings.preserved,
            with_reason=with_reason,
        )

    def _shown(self, path: Path) -> str:
        return shown_path(path, self.settings.run_root, kept=self.settings.preserved)

    # Decisions --------------------------------------------------------------------------

    def _with_step_facts(self, decision: Decision, reports: list[_WorkerReport]) -> Decision:
        """The decision read against the steps' random draws and clipping (step_facts.py)."""
        everyone = [*reports, *self.rank_reports]
        envelope = decision.noise_envelope or {}
        return read_with_step_facts(
            decision,
            random_modules=sorted(
                {
                    str(name)
                    for report in everyone
                    for name in report.random_draws.get("modules", [])
                }  # type: ignore[union-attr]
            ),
            drew=any(bool(report.random_draws.get("drew")) for report in everyone),
            noise_measured=any(
                value > 0 for row in envelope.get("steps", ()) for value in row["noise"].values()
            ),
            declared_clip=self.plans["candidate"].clip_grad_norm,
            microbatch_count=self.plans["candidate"].microbatch_count,
            candidate_clipping=_clipping_record(reports[-1]),
            reference_clipping=_clipping_record(reports[0]),
            own_step=bool(self.own_step_children),
            tolerance=isinstance(self.policy, ToleranceComparison),
            losses_unreported=bool(self.own_step_children)
            and "loss_accounting" in reports[-1].unobserved_phases,
        )

    def _decide(self, reports: list[_WorkerReport]) -> Decision:
        reports_with_ranks = [*reports[:-1], *(self.rank_reports or reports[-1:])]
        if len({report.pid for report in reports_with_ranks}) != len(reports_with_ranks):
            return Decision(Outcome.ERROR, "fresh executions did not have distinct process IDs")
        self.settings.progress.event("comparison", "start")
        began = time.perf_counter()
        views = []
        for report in (*reports, *self.rank_reports):
            view = _phase_views(report)
            if isinstance(view, Decision):
                return view
            views.append(view)
        if self.own_step_children:
            views = _accounting_as_reported(views, views[len(reports) - 1])
        try:
            return self._judged(views[: len(reports)], views[len(reports) :])
        finally:
            self.settings.progress.event("comparison", "end", time.perf_counter() - began)

    def _judged(
        self, views: list[dict[str, Snapshot]], rank_views: list[dict[str, Snapshot]]
    ) -> Decision:
        """The verdict on the baselines', the candidate's and its ranks' phase views."""
        own_step = bool(self.own_step_children)
        if not isinstance(self.policy, NoiseComparison):
            return judge_observations(self.policy, views, rank_views, own_step=own_step)
        return judge_noise_observations(
            self.policy,
            views[:-1],
            views[-1],
            rank_views,
            own_step=own_step,
            sample_names=self.child_names[:-1],
        )


def _clipping_record(report: _WorkerReport) -> dict[str, object] | None:
    """The `clipping` a child's gradient phase recorded, as plain values (None: it did not clip)."""
    if report.observations is None:
        return None
    gradient = report.observations.state.as_dict().get("gradient")
    clipping = gradient.as_dict().get("clipping") if isinstance(gradient, FrozenMapping) else None
    if not isinstance(clipping, FrozenMapping):
        return None
    plain: dict[str, object] = {}
    for key, value in clipping.entries:
        if isinstance(value, FrozenTensor):
            # The recorder stores float32 norms; read without torch (the parent may not load it).
            one_float = (
                value.dtype == "torch.float32" and value.numel == 1 and value.data is not None
            )
            value = struct.unpack("=f", bytes(value.data[:4]))[0] if one_float else None
        plain[str(key)] = value
    return plain


ACCOUNTING_TOTALS = ("denominator", "normalization_captured", "numerator")


def _accounting_as_reported(
    views: list[dict[str, Snapshot]], candidate: dict[str, Snapshot]
) -> list[dict[str, Snapshot]]:
    """Every view's loss record cut to what an own step reported: its losses' values only.

    A train_step may return `LossAccounting(value=...)` alone while `loss()`
    declares numerator and denominator; the totals it did not report are not
    a difference, and `effective_loss` still carries its loss scale.
    """
    record = candidate.get("loss_accounting")
    reported = _loss_record(record) if record is not None else None
    if reported is None or "numerator" in reported.keys():
        return views
    return [
        {
            phase: Snapshot(
                snapshot.step,
                _without_totals(snapshot.state),
                snapshot.backend,
            )
            if phase == "loss_accounting"
            else snapshot
            for phase, snapshot in view.items()
        }
        for view in views
    ]


def _loss_record(snapshot: Snapshot) -> FrozenMapping | None:
    inner = snapshot.state.as_dict().get("loss_accounting")
    return inner if isinstance(inner, FrozenMapping) else None


def _without_totals(state: FrozenMapping) -> FrozenMapping:
    entries = []
    for key, value in state.entries:
        if key == "loss_accounting" and isinstance(value, FrozenMapping):
            value = FrozenMapping(
                tuple(entry for entry in value.entries if entry[0] not in ACCOUNTING_TOTALS)
            )
        entries.append((key, value))
    return FrozenMapping(tuple(entries))


def _phase_views(report: _WorkerReport) -> dict[str, Snapshot] | Decision:
    """Per-phase snapshots of one child's observation file: initial at step 0, phases after."""
    observations = report.observations
    assert observations is not None
    subtrees = observations.state.as_dict()
    observed = [phase for phase in PHASES if phase not in report.unobserved_phases]
    missing = [key for key in (INITIAL_KEY, *observed) if key not in subtrees]
    if missing:
        return Decision(
            Outcome.ERROR,
            f"{report.name}'s result was corrupt: observations lack {', '.join(missing)}",
        )
    views = {INITIAL_KEY: Snapshot(0, subtrees[INITIAL_KEY], observations.backend)}
    for phase in (*observed, RANKS_KEY) if RANKS_KEY in subtrees else observed:
        views[phase] = Snapshot(observations.step, subtrees[phase], observations.backend)
    return views
