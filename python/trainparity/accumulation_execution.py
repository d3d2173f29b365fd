"""One accumulation check's three children and the decisions taken from what they observed."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainparity.accumulation_plan import INITIAL_KEY, PHASES, AccumulationExecutionPlan
from trainparity.comparison import Difference, ExactComparison, ToleranceComparison
from trainparity.error_text import error_text
from trainparity.outcomes import Outcome
from trainparity.processes import ChildGroup, ChildLaunchError, ChildResult, ChildSpec
from trainparity.run_setup import RunSettings
from trainparity.snapshot import Snapshot
from trainparity.snapshot_file import SnapshotFileError, read_snapshot

__all__ = ["CHILD_NAMES", "AccumulationExecution"]

CHILD_NAMES = ("baseline_a", "baseline_b", "candidate")
INITIAL_STATE = "initial_state"
RESULT_FILE = "result.json"
OBSERVATIONS_FILE = "observations.safetensors"

_PASS_MESSAGE = "declared executions are equivalent for one optimizer-update boundary"
_STDERR_TAIL_CHARACTERS = 300


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


class AccumulationExecution:
    """One check's three children and the decisions taken from what they observed."""

    def __init__(
        self,
        *,
        case_spec: str,
        plans: dict[str, AccumulationExecutionPlan],
        device: str,
        seed: int,
        settings: RunSettings,
        policy: ExactComparison | ToleranceComparison,
    ) -> None:
        self.case_spec = case_spec
        self.plans = plans
        self.device = device
        self.seed = seed
        self.settings = settings
        self.policy = policy
        self.group = ChildGroup(on_event=self._on_child_event)
        self.launch_errors: dict[str, str] = {}
        self.peak_bytes = 0
        self.process_ids: list[int] = []

    def run(self) -> dict[str, Any]:
        with self.group:
            try:
                if self.settings.parallel:
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
        directory = self.settings.run_root / name
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
        try:
            spec = ChildSpec(
                name=name,
                argv=argv,
                cwd=self.settings.command_dir,
                env=self.settings.environment,
                stdout_path=directory / "stdout.log",
                stderr_path=directory / "stderr.log",
            )
            self.group.start(spec, timeout=self.settings.timeout)
        except (ChildLaunchError, OSError, TypeError, ValueError) as error:
            self.launch_errors[name] = f"worker launch failed ({name}): {error_text(error)}"

    def _on_child_event(self, name: str, kind: str, result: ChildResult | None) -> None:
        self.settings.progress.event(
            name, kind, result.wall_seconds if result is not None else None
        )
        if kind == "end":
            self.peak_bytes = max(self.peak_bytes, _tree_bytes(self.settings.run_root))

    def _report(self, name: str) -> _ChildReport:
        """Wait for child `name` and read what it published; raise _Verdict unless PASS."""
        if not self.settings.parallel:
            self._start(name)
        if name in self.launch_errors:
            raise _Verdict(Outcome.ERROR, self.launch_errors[name])
        result = self.group.wait_for(name)
        assert result is not None  # wait_for without a timeout returns once reaped
        self.process_ids.append(result.pid)
        directory = self.settings.run_root / name
        if result.timed_out:
            raise _Verdict(
                Outcome.ERROR,
                self._with_logs(
                    name, f"worker timeout ({name} ran past {self.settings.timeout:g} s)"
                ),
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
        if report.outcome is not Outcome.PASS:
            raise _Verdict(report.outcome, report.message)
        return report

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
            observations, _ = read_snapshot(path.parent / OBSERVATIONS_FILE)
        except (OSError, ValueError, KeyError, TypeError, SnapshotFileError) as error:
            raise _Verdict(
                Outcome.ERROR,
                self._with_logs(name, f"worker result was corrupt ({name}: {error_text(error)})"),
            ) from None
        return _ChildReport(name, pid, outcome, message, captured, observations)

    def _with_logs(self, name: str, message: str) -> str:
        if self.settings.preserved:
            return f"{message}; see {name}/stderr.log under the preserved work_dir"
        tail = _last_line(self.settings.run_root / name / "stderr.log")
        return f"{message}; last stderr line: {tail}" if tail else message

    # Decisions --------------------------------------------------------------------------

    def _decide(self, reports: list[_ChildReport]) -> dict[str, Any]:
        if len({report.pid for report in reports}) != len(reports):
            raise _Verdict(Outcome.ERROR, "fresh executions did not have distinct process IDs")
        self.settings.progress.event("comparison", "start")
        began = time.perf_counter()
        try:
            self._compare([_phase_views(report) for report in reports])
        finally:
            self.settings.progress.event("comparison", "end", time.perf_counter() - began)
        return {
            "outcome": Outcome.PASS,
            "message": _PASS_MESSAGE,
            "verified_equal_initial_state": True,
        }

    def _compare(self, views: list[dict[str, Snapshot]]) -> None:
        """Raise the first ABSTAIN or FAIL verdict in contract order; return when all agree."""
        baseline_a, baseline_b, candidate = views
        self._judge_initial(baseline_a[INITIAL_KEY], baseline_b[INITIAL_KEY], candidate)
        for phase in PHASES:
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
    missing = [key for key in (INITIAL_KEY, *PHASES) if key not in subtrees]
    if missing:
        raise _Verdict(
            Outcome.ERROR,
            f"worker result was corrupt ({report.name}: observations lack {', '.join(missing)})",
        )
    views = {INITIAL_KEY: Snapshot(0, subtrees[INITIAL_KEY], observations.backend)}
    for phase in PHASES:
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
