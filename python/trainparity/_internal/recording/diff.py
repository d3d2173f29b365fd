"""diff_recordings: where two recorded runs part, and how fast they drift apart afterwards."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import (
    ComparisonPolicy,
    Difference,
    ExactComparison,
    ToleranceComparison,
    policy_report_fields,
)
from trainparity._internal.comparison.windows import ValueWindow
from trainparity._internal.noise.verdict import envelope_verdict
from trainparity._internal.noise.walk import (
    EnvelopeEvent,
    EnvelopeWalk,
    Position,
    closest_approach,
    first_noisy_step,
    sensitivity_line,
)
from trainparity._internal.outcomes import Outcome
from trainparity._internal.recording.frames import FRAME_VERSION
from trainparity._internal.recording.reader import RecordedStep, Recording, read_recording
from trainparity._internal.recording.trajectory import compare_records, drift_point
from trainparity._internal.reports.reported import ReportedResult
from trainparity._internal.why.environment_leads import EnvironmentLead, environment_leads

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
    # Under NoiseComparison (`noise=`): the envelope of the baseline and the noise pair.
    noise_envelope: dict[str, Any] | None = field(
        default=None, metadata={"omitted_when_none": True}
    )


def diff_recordings(
    baseline: str | os.PathLike[str],
    candidate: str | os.PathLike[str],
    *,
    comparison: ComparisonPolicy | None = None,
    rank: int | None = None,
    trust_digests: bool = False,
    common_steps_only: bool = False,
    noise: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None,
) -> RecordingDiff:
    """Compare two recordings (directories or rank files) step by step; see RecordingDiff.

    Both are verified as they are read (`trust_digests=True` skips the
    tensor-byte check). Unreadable or damaged recordings raise RecordingError.
    When one recording has steps the other lacks, equal common steps are
    ABSTAIN, not PASS; `common_steps_only=True` asks for the common steps
    alone (a resumed run, which starts at its split step, against its
    baseline).

    With `comparison=NoiseComparison(...)`, `noise=(A, B)` names two more
    recordings whose difference is accepted as noise (1 and 2 threads, two
    repeats): the baseline and the pair measure the envelope, step by step on
    the steps all four recorded, and the candidate is judged against it.
    """
    noise_policy = _noise_policy(comparison, noise)
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
            if not isinstance(comparison, ToleranceComparison):
                beyond = step  # exact; under NoiseComparison the envelope decides below
            elif compare_records(comparison, left_steps[step], right_steps[step]).differences:
                beyond = step
        drift.append(drift_point(step, left_steps[step], result.relative_rms_errors))
    only_left = tuple(sorted(set(left_steps) - set(right_steps)))
    only_right = tuple(sorted(set(right_steps) - set(left_steps)))
    envelope_report = None
    if noise_policy is not None:
        assert noise is not None
        outcome, message, envelope_report = _noise_verdict(
            noise_policy, (baseline, *noise), left, right, compared, rank, trust_digests
        )
        # The first step beyond the declared relation is the envelope's first exit.
        beyond = envelope_report.get("first_exit_step")
    else:
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
        noise_envelope=envelope_report,
        **policy,
    )


def _noise_policy(comparison: object, noise: object) -> NoiseComparison | None:
    """The NoiseComparison and its pair, checked; None for the exact and tolerance comparisons."""
    if comparison is not None and not isinstance(
        comparison, (ExactComparison, ToleranceComparison, NoiseComparison)
    ):
        raise TypeError(
            "comparison must be ExactComparison, ToleranceComparison, NoiseComparison or None"
        )
    if not isinstance(comparison, NoiseComparison):
        if noise is not None:
            raise TypeError("noise=(A, B) needs comparison=NoiseComparison(...)")
        return None
    if noise is None or isinstance(noise, (str, bytes)) or len(noise) != 2:  # type: ignore[arg-type]
        raise TypeError(
            "NoiseComparison needs noise=(A, B): two recordings whose difference is accepted "
            "as noise (e.g. the baseline's run with 1 and with 2 threads)"
        )
    return comparison


def _noise_verdict(
    policy: NoiseComparison,
    sample_paths: tuple[Any, ...],
    left: Recording,
    right: Recording,
    compared: list[int],
    rank: int | None,
    trust_digests: bool,
) -> tuple[Outcome, str, dict[str, Any]]:
    """The candidate judged against the envelope of the baseline and the noise pair."""
    samples: dict[str, Recording] = {"baseline": left}
    for label, path in zip(("noise_a", "noise_b"), sample_paths[1:], strict=True):
        found = read_recording(path, rank=rank, trust_digests=trust_digests)
        if any(os.path.samefile(found.path, other.path) for other in samples.values()):
            continue  # the same file twice measures nothing
        samples[label] = found
    if len(samples) < 2:
        raise ValueError("the noise pair must hold a recording other than the baseline")
    by_step = {label: _by_step(recording.steps) for label, recording in samples.items()}
    steps = [step for step in compared if all(step in found for found in by_step.values())]
    candidate = _by_step(right.steps)
    walk = EnvelopeWalk(policy, left.rank)
    event = walk.run(
        Position(
            step,
            tuple((label, found[step]) for label, found in by_step.items()),
            (("candidate", candidate[step], False),),
        )
        for step in steps
    )
    first = first_noisy_step(walk.rows)
    report = {
        **policy.settings(),
        "judged_on": "recorded steps",
        "samples": [str(recording.path) for recording in samples.values()],
        "steps": [row.to_dict(1) for row in walk.rows],
        "closest_approach": closest_approach(walk.rows, 1),
        "sensitivity": sensitivity_line(walk.rows, first),
    }
    report["first_exit_step"] = (
        event.step if event is not None and event.kind == "candidate_left" else None
    )
    if not steps:
        return Outcome.ERROR, "the four recordings have no step in common", report
    if event is None:
        closest = report["closest_approach"]
        tail = (
            "it matches them bit for bit"
            if closest is None
            else f"closest approach {closest['ratio']:.3g}× the noise at step "
            f"{closest['step']}, {closest['path']}"
        )
        return (
            Outcome.PASS,
            (
                f"the candidate stays inside the noise of the baseline and the noise pair at "
                f"{len(steps)} steps; {tail}"
            ),
            report,
        )
    outcome, message = envelope_verdict(
        event, policy, samples_differ=_samples_differ, candidate_left=_candidate_left
    )
    return outcome, message, report


def _samples_differ(event: EnvelopeEvent, path: str) -> str:
    return (
        f"the noise samples disagree at step {event.step} on {path} ({event.phase}), which "
        "NoiseComparison holds exact: they do not measure noise"
    )


def _candidate_left(event: EnvelopeEvent, path: str, words: str | None) -> str:
    detail = "" if words is None else f" ({words})"
    return (
        f"the runs part beyond the noise at step {event.step}: {path}{detail}: more than "
        "reordering alone produces"
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
