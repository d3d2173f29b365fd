"""check_resume's use of recordings: each phase records into its own directory; steps are aligned.

Alignment (docs/resume.md): baseline_a and baseline_b record by record;
candidate_split against baseline_a's first records; candidate_resume's first
record (taken right after loading) against baseline_a's record at split_step,
whatever step it claims (a claim that differs is itself a difference, at path
`step`), and its later records one by one after that.

Each rank is compared with the same rank. When the recordings hold several
ranks, every difference path is put under its rank (`rank1.rng.torch`), so
the verdict names it; one rank's recordings keep the plain paths.
"""

from __future__ import annotations

from itertools import zip_longest
from pathlib import Path
from typing import Any

from trainparity.comparison import ComparisonPolicy, Difference
from trainparity.recording.reader import Recording, read_recordings
from trainparity.recording.recorder import ALSO_VARIABLE, PHASE_VARIABLE, RECORD_VARIABLE
from trainparity.recording.trajectory import (
    StepDivergence,
    first_divergence,
    rank_named,
    recorded_steps,
)

RECORDINGS_DIRECTORY = "recordings"
_PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")


class TrajectoryError(Exception):
    """Recordings that exist but cannot be used: unreadable, or missing from some phases."""


def phase_recording_environment(run_root: Path, phase: str, split_step: int) -> dict[str, str]:
    """Variables that make `record()` in a phase's process write to that phase's directory.

    The split step is always recorded (whatever TRAINPARITY_RECORD_EVERY says),
    so the round trip can be compared.
    """
    return {
        RECORD_VARIABLE: str(run_root / RECORDINGS_DIRECTORY / phase),
        PHASE_VARIABLE: phase,
        ALSO_VARIABLE: str(split_step),
    }


class ResumeTrajectories:
    """The four phases' recordings of one check, read when the decision sequence needs them."""

    def __init__(self, run_root: Path, policy: ComparisonPolicy, split_step: int) -> None:
        self.root = run_root / RECORDINGS_DIRECTORY
        self.policy = policy
        self.split_step = split_step
        self.recordings: dict[str, dict[int, Recording]] = {}
        self.divergence: StepDivergence | None = None

    @property
    def recorded(self) -> bool:
        return any(self.recordings.values())

    def baselines_part(self) -> StepDivergence | None:
        """The first step at which baseline_a and baseline_b differ (None when equal or not recorded)."""
        first, second = self._read("baseline_a"), self._read("baseline_b")
        if not first and not second:
            return None
        self._require_same_ranks("baseline_a", "baseline_b")
        found = [
            first_divergence(
                self.policy,
                ((a, b, False) for a, b in zip_longest(first[rank].steps, second[rank].steps)),
                rank=rank,
                baseline_phase="baseline_a",
                candidate_phase="baseline_b",
            )
            for rank in first
        ]
        self.divergence = _earliest(rank_named(found, len(first)))
        return self.divergence

    def candidates_part(self) -> StepDivergence | None:
        """The first step at which the split or resumed run differs from baseline_a."""
        if not self.recordings.get("baseline_a"):
            return None
        baseline = self.recordings["baseline_a"]
        split, resumed = self._read("candidate_split"), self._read("candidate_resume")
        self._require_same_ranks("baseline_a", "candidate_split")
        self._require_same_ranks("baseline_a", "candidate_resume")
        found = []
        for rank, recording in baseline.items():
            steps = recording.steps
            anchor = next(
                (index for index, step in enumerate(steps) if step.step == self.split_step), None
            )
            if anchor is None:
                raise TrajectoryError(
                    f"baseline_a recorded no step {self.split_step} (the split step): call "
                    "record() after every step so the round trip can be compared"
                )
            split_pairs = [
                (steps[index] if index < len(steps) else None, step, False)
                for index, step in enumerate(split[rank].steps)
            ]
            found.append(
                first_divergence(
                    self.policy,
                    split_pairs,
                    rank=rank,
                    baseline_phase="baseline_a",
                    candidate_phase="candidate_split",
                )
            )
            resumed_pairs = [
                (baseline_step, resumed_step, offset == 0)
                for offset, (baseline_step, resumed_step) in enumerate(
                    zip_longest(steps[anchor:], resumed[rank].steps)
                )
            ]
            found.append(
                first_divergence(
                    self.policy,
                    resumed_pairs,
                    rank=rank,
                    baseline_phase="baseline_a",
                    candidate_phase="candidate_resume",
                )
            )
        self.divergence = _earliest(rank_named(found, len(baseline)))
        return self.divergence

    def report_fields(self, final_differences: tuple[Difference, ...]) -> dict[str, Any]:
        """The report keys recordings add (none when the case does not record)."""
        if not self.recorded:
            return {}
        ranks = sorted({rank for phase in self.recordings.values() for rank in phase})
        return {
            "trajectory": {
                "ranks": ranks,
                "recorded_steps": {
                    phase: recorded_steps(recordings, several_ranks=len(ranks) > 1)
                    for phase, recordings in self.recordings.items()
                    if recordings
                },
                "first_divergence": None if self.divergence is None else self.divergence.to_dict(),
            },
            "final_state_differences": final_differences,
        }

    def _read(self, phase: str) -> dict[int, Recording]:
        if phase not in self.recordings:
            try:
                recordings = read_recordings(self.root / phase)
            except Exception as error:  # RecordingError, OSError: the verdict is ERROR
                raise TrajectoryError(f"{phase} recording is unreadable: {error}") from None
            self.recordings[phase] = {
                rank: recording for rank, recording in recordings.items() if recording.steps
            }
        return self.recordings[phase]

    def _require_same_ranks(self, reference: str, other: str) -> None:
        expected, found = set(self._read(reference)), set(self._read(other))
        if expected != found:
            raise TrajectoryError(
                f"{other} recorded ranks {sorted(found)} but {reference} recorded "
                f"{sorted(expected)}: record() must run in every phase"
            )


def _earliest(found: list[StepDivergence | None]) -> StepDivergence | None:
    """The first divergence in (step, rank) order; candidate_split before candidate_resume on ties."""
    present = [(index, divergence) for index, divergence in enumerate(found) if divergence]
    if not present:
        return None
    return min(present, key=lambda item: (item[1].step, item[1].rank, item[0]))[1]
