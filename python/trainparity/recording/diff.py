"""diff_recordings: where two recorded runs part, and how fast they drift apart afterwards."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from trainparity.comparison.policies import (
    ComparisonPolicy,
    Difference,
    ExactComparison,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity.comparison.windows import ValueWindow
from trainparity.environment_leads import EnvironmentLead, environment_leads
from trainparity.outcomes import Outcome
from trainparity.recording.frames import FRAME_VERSION
from trainparity.recording.reader import RecordedStep, Recording, read_recording
from trainparity.recording.trajectory import compare_records, drift_point
from trainparity.reports.reported import ReportedResult

__all__ = ["RecordedFile", "RecordingDiff", "diff_recordings"]


@dataclass(frozen=True)
class RecordedFile:
    """What a diff says about one side's file: its frame version, and a killed writer's cut-short tail."""

    frame_version: int | None
    partial_tail: bool
    partial_tail_step: int | None

    @classmethod
    def of(cls, recording: Recording) -> RecordedFile:
        return cls(recording.frame_version, recording.partial_tail, recording.partial_tail_step)


@dataclass(frozen=True, repr=False)
class RecordingDiff(ReportedResult):
    """Two recordings compared step by step (steps aligned by the step each record claims).

    `first_divergent_step` is the first step whose records differ in any bit
    (`primary_difference` its first path); `first_step_beyond_tolerance` the
    first step that differs under the declared ToleranceComparison (without
    one it equals `first_divergent_step`). `value_windows` hold the elements
    around each differing tensor's first differing element at that step. `drift` has one point per compared
    step: the largest relative RMS error (‖a−b‖₂/‖a‖₂, from the values when
    both steps stored them, else the norm-based lower bound) over the tensors
    of each top-level component, and over all of them.

    Steps recorded on one side only make a verdict that found no difference
    ABSTAIN, unless `common_steps_only` was asked for. `baseline_file` and
    `candidate_file` say whether a file is an older one (frame version 0,
    headers without checksum) and whether it ended in a cut-short frame.
    """

    outcome: Outcome
    message: str
    baseline: str
    candidate: str
    rank: int = 0
    comparison_policy: str = "exact"
    comparison_rtol: float | None = None
    comparison_atol: float | None = None
    comparison_equal_nan: bool | None = None
    integrity: str = "verified"
    compared_steps: tuple[int, ...] = ()
    steps_only_in_baseline: tuple[int, ...] = ()
    steps_only_in_candidate: tuple[int, ...] = ()
    common_steps_only: bool = False
    baseline_file: RecordedFile | None = None
    candidate_file: RecordedFile | None = None
    first_divergent_step: int | None = None
    primary_difference: Difference | None = None
    value_windows: tuple[ValueWindow, ...] = ()
    first_step_beyond_tolerance: int | None = None
    drift: tuple[dict[str, Any], ...] = ()
    environment_leads: tuple[EnvironmentLead, ...] = ()


def diff_recordings(
    baseline: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    comparison: ComparisonPolicy | None = None,
    rank: int | None = None,
    trust_digests: bool = False,
    common_steps_only: bool = False,
) -> RecordingDiff:
    """Compare two recordings (directories or rank files) step by step; see RecordingDiff.

    Both are verified as they are read (`trust_digests=True` skips the
    tensor-byte check). Unreadable or damaged recordings raise RecordingError.
    When one recording has steps the other lacks, equal common steps are
    ABSTAIN, not PASS; `common_steps_only=True` asks for the common steps
    alone (a resumed run, which starts at its split step, against its
    baseline).
    """
    if comparison is not None and not isinstance(
        comparison, (ExactComparison, ToleranceComparison)
    ):
        raise TypeError("comparison must be ExactComparison, ToleranceComparison or None")
    left = read_recording(baseline, rank=rank, trust_digests=trust_digests)
    right = read_recording(candidate, rank=rank, trust_digests=trust_digests)
    left_steps, right_steps = _by_step(left.steps), _by_step(right.steps)
    compared = sorted(set(left_steps) & set(right_steps))
    exact = ExactComparison()
    first_step: int | None = None
    primary: Difference | None = None
    windows: tuple[ValueWindow, ...] = ()
    beyond: int | None = None
    drift = []
    for step in compared:
        result = compare_records(exact, left_steps[step], right_steps[step])
        if result.differences and first_step is None:
            first_step, primary = step, result.differences[0]
            windows = result.value_windows
        if result.differences and beyond is None:
            if comparison is None or isinstance(comparison, ExactComparison):
                beyond = step
            elif compare_records(comparison, left_steps[step], right_steps[step]).differences:
                beyond = step
        drift.append(drift_point(step, left_steps[step], result.relative_rms_errors))
    only_left = tuple(sorted(set(left_steps) - set(right_steps)))
    only_right = tuple(sorted(set(right_steps) - set(left_steps)))
    outcome, message = _verdict(first_step, beyond, primary, compared, comparison)
    outcome, message = _unmatched(outcome, message, only_left, only_right, common_steps_only)
    message += "".join(
        _file_notes(side, recording)
        for side, recording in (("baseline", left), ("candidate", right))
    )
    policy = policy_report_fields(comparison)
    return RecordingDiff(
        outcome=outcome,
        message=message,
        baseline=str(left.path),
        candidate=str(right.path),
        rank=left.rank,
        integrity="digests trusted" if trust_digests else "verified",
        compared_steps=tuple(compared),
        steps_only_in_baseline=only_left,
        steps_only_in_candidate=only_right,
        common_steps_only=common_steps_only,
        baseline_file=RecordedFile.of(left),
        candidate_file=RecordedFile.of(right),
        first_divergent_step=first_step,
        primary_difference=primary,
        value_windows=windows,
        first_step_beyond_tolerance=beyond,
        drift=tuple(drift),
        environment_leads=environment_leads(left.environment, right.environment),
        **policy,
    )


def _by_step(steps: tuple[RecordedStep, ...]) -> dict[int, RecordedStep]:
    """Records by the step they claim; a step recorded twice keeps its first record."""
    found: dict[int, RecordedStep] = {}
    for step in steps:
        found.setdefault(step.step, step)
    return found


def _verdict(
    first_step: int | None,
    beyond: int | None,
    primary: Difference | None,
    compared: list[int],
    comparison: ComparisonPolicy | None,
) -> tuple[Outcome, str]:
    if not compared:
        return Outcome.ERROR, "the recordings have no step in common"
    if first_step is None:
        counted = (
            "the 1 compared step" if len(compared) == 1 else f"all {len(compared)} compared steps"
        )
        return Outcome.PASS, f"the runs are identical at {counted}"
    assert primary is not None
    parted = f"the runs part at step {first_step}: {primary.path}"
    if beyond is None:
        return Outcome.PASS, f"{parted}; within the declared tolerance at every step"
    if isinstance(comparison, ToleranceComparison):
        return Outcome.FAIL, f"{parted}; beyond the declared tolerance from step {beyond}"
    return Outcome.FAIL, parted


def _unmatched(
    outcome: Outcome,
    message: str,
    only_left: tuple[int, ...],
    only_right: tuple[int, ...],
    common_steps_only: bool,
) -> tuple[Outcome, str]:
    """The verdict with the steps recorded on one side only: a PASS over fewer steps is ABSTAIN.

    Equal common steps say nothing about the steps one run lacks (its writer
    was killed, it resumed later, a file lost frames), so the verdict abstains
    unless the caller asked for the common steps only.
    """
    sides = [
        f"{_step_list(steps)} only in {side}"
        for side, steps in (("baseline", only_left), ("candidate", only_right))
        if steps
    ]
    if not sides:
        return outcome, message
    unmatched = " and ".join(sides)
    if common_steps_only:
        return outcome, f"{message} (common steps only, as asked; {unmatched})"
    if outcome is Outcome.PASS:
        return Outcome.ABSTAIN, (
            f"{message}, but {unmatched}: no verdict on steps one run lacks (where only the "
            "common steps should match, diff with common_steps_only=True, --common-steps-only)"
        )
    return outcome, f"{message}; {unmatched}"


def _file_notes(side: str, recording: Recording) -> str:
    notes = ""
    if recording.partial_tail:
        cut = (
            f"its step {recording.partial_tail_step}"
            if recording.partial_tail_step is not None
            else "its last frame"
        )
        notes += (
            f"; the {side} ends in {cut} cut short, as a killed writer leaves it (partial tail)"
        )
    if recording.frame_version is not None and recording.frame_version < FRAME_VERSION:
        notes += (
            f"; the {side} is an older recording (frame version {recording.frame_version}) "
            "whose frame headers carry no checksum"
        )
    return notes


def _step_list(steps: tuple[int, ...]) -> str:
    """`steps 1-3, 7` for (1, 2, 3, 7); `step 4` for one."""
    runs: list[list[int]] = []
    for step in steps:
        if runs and step == runs[-1][-1] + 1:
            runs[-1].append(step)
        else:
            runs.append([step])
    text = ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
    return f"step {text}" if len(steps) == 1 else f"steps {text}"
