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

from trainparity.comparison.policies import ComparisonPolicy
from trainparity.recording.phase_recordings import (
    RECORDINGS_DIRECTORY,
    PhaseRecordings,
    TrajectoryError,
    recording_environment,
)
from trainparity.recording.trajectory import StepDivergence, first_divergence, rank_named
from trainparity.recording.variables import ALSO_VARIABLE

__all__ = [
    "RECORDINGS_DIRECTORY",
    "ResumeTrajectories",
    "TrajectoryError",
    "phase_recording_environment",
]


def phase_recording_environment(run_root: Path, phase: str, split_step: int) -> dict[str, str]:
    """Variables that make `record()` in a phase's process write to that phase's directory.

    The split step is always recorded (whatever TRAINPARITY_RECORD_EVERY says),
    so the round trip can be compared.
    """
    return {**recording_environment(run_root, phase), ALSO_VARIABLE: str(split_step)}


class ResumeTrajectories(PhaseRecordings):
    """The four phases' recordings of one check, read when the decision sequence needs them."""

    def __init__(self, run_root: Path, policy: ComparisonPolicy, split_step: int) -> None:
        super().__init__(run_root, policy)
        self.split_step = split_step

    def baselines_part(self) -> StepDivergence | None:
        """The first step at which baseline_a and baseline_b differ (None when equal or not recorded)."""
        first, second = self.read("baseline_a"), self.read("baseline_b")
        if not first and not second:
            return None
        self._require_same_ranks("baseline_a", "baseline_b")
        found = [
            first_divergence(
                self.policy,
                self.aligned(
                    "baseline_a",
                    "baseline_b",
                    rank,
                    ((a, b, False) for a, b in zip_longest(first[rank].steps, second[rank].steps)),
                ),
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
        split, resumed = self.read("candidate_split"), self.read("candidate_resume")
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
                    self.aligned("baseline_a", "candidate_split", rank, split_pairs),
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
                    self.aligned("baseline_a", "candidate_resume", rank, resumed_pairs),
                    rank=rank,
                    baseline_phase="baseline_a",
                    candidate_phase="candidate_resume",
                )
            )
        self.divergence = _earliest(rank_named(found, len(baseline)))
        return self.divergence

    def _require_same_ranks(self, reference: str, other: str) -> None:
        expected, found = set(self.read(reference)), set(self.read(other))
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
