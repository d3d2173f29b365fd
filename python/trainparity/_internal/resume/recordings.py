"""check_resume's use of recordings: each phase records into its own directory; steps are aligned.

Alignment (docs/resume.md): baseline_a and baseline_b record by record;
candidate_split against baseline_a's first records; each resumed phase's first
record (taken right after loading) against baseline_a's record at the step it
resumed from, whatever step it claims (a claim that differs is itself a
difference, at path `step`), and its later records one by one after that. A
chain of resumes (resume/chain.py) aligns every link the same way.

Each rank is compared with the same rank. When the recordings hold several
ranks, every difference path is put under its rank (`rank1.rng.torch`), so
the verdict names it; one rank's recordings keep the plain paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import zip_longest
from pathlib import Path

from trainparity._internal.comparison.policies import ComparisonPolicy
from trainparity._internal.recording.elastic import global_pairs, joined_steps
from trainparity._internal.recording.phase_recordings import (
    RECORDINGS_DIRECTORY,
    PhaseRecordings,
    TrajectoryError,
    recording_directory,
    recording_environment,
)
from trainparity._internal.recording.trajectory import StepDivergence, first_divergence, rank_named
from trainparity._internal.recording.variables import ALSO_VARIABLE

__all__ = [
    "RECORDINGS_DIRECTORY",
    "ResumeTrajectories",
    "TrajectoryError",
    "aligned_records",
    "phase_recording_environment",
    "recording_directory",
]


def phase_recording_environment(
    run_root: Path, phase: str, split_steps: Sequence[int]
) -> dict[str, str]:
    """Variables that make `record()` in a phase's process write to that phase's directory.

    The split steps are always recorded (whatever TRAINPARITY_RECORD_EVERY
    says), so every round trip can be compared.
    """
    also = ",".join(str(step) for step in split_steps)
    return {**recording_environment(run_root, phase), ALSO_VARIABLE: also}


class ResumeTrajectories(PhaseRecordings):
    """The phases' recordings of one check, read when the decision sequence needs them.

    `candidates` is the candidate side in order, (phase, step it starts
    from, elastic): candidate_split from 0, then each resumed phase from its
    split step; an elastic phase ran on another world size than baseline_a
    and is compared on the global state (recording/elastic.py).
    """

    def __init__(
        self,
        run_root: Path,
        policy: ComparisonPolicy,
        candidates: Sequence[tuple[str, int, bool]],
    ) -> None:
        super().__init__(run_root, policy)
        self.candidates = tuple(candidates)

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
        """The first step at which a candidate phase (split or resumed) differs from baseline_a."""
        if not self.recordings.get("baseline_a"):
            return None
        baseline = self.recordings["baseline_a"]
        found: list[StepDivergence | None] = []
        last = self.candidates[-1][0]
        for phase, from_step, elastic in self.candidates:
            self.read(phase)
            if elastic:
                found.append(self._elastic_part(phase, from_step, to_end=phase == last))
                continue
            self._require_same_ranks("baseline_a", phase)
            per_rank = [
                first_divergence(
                    self.policy,
                    self.aligned(
                        "baseline_a",
                        phase,
                        rank,
                        aligned_records(
                            recording.steps,
                            self.recordings[phase][rank].steps,
                            from_step,
                            to_end=phase == last,
                        ),
                    ),
                    rank=rank,
                    baseline_phase="baseline_a",
                    candidate_phase=phase,
                )
                for rank, recording in baseline.items()
            ]
            found.extend(rank_named(per_rank, len(baseline)))
        self.divergence = _earliest(found)
        return self.divergence

    def _elastic_part(self, phase: str, from_step: int, *, to_end: bool) -> StepDivergence | None:
        """A phase on another world size than baseline_a, compared on the global state."""
        if not self.recordings[phase]:
            raise TrajectoryError(f"{phase} recorded nothing: record() must run in every phase")
        used: set[str] = set()
        pairs = aligned_records(
            joined_steps(self.recordings["baseline_a"], "baseline_a"),
            joined_steps(self.recordings[phase], phase),
            from_step,
            to_end=to_end,
        )
        divergence = first_divergence(
            self.policy,
            global_pairs(pairs, used),
            rank=0,
            baseline_phase="baseline_a",
            candidate_phase=phase,
        )
        if used:  # else no record was compared
            self.compared_on[phase] = " and ".join(sorted(used))
        return divergence

    def _require_same_ranks(self, reference: str, other: str) -> None:
        expected, found = set(self.read(reference)), set(self.read(other))
        if expected != found:
            raise TrajectoryError(
                f"{other} recorded ranks {sorted(found)} but {reference} recorded "
                f"{sorted(expected)}: record() must run in every phase"
            )


def aligned_records(
    baseline: Sequence, candidate: Sequence, from_step: int, *, to_end: bool
) -> list:
    """(baseline record, candidate record, is the record after loading) pairs of one phase.

    The exact comparison (ResumeTrajectories) and the envelope
    (resume/noise_recordings.py) align a phase with this one rule.

    A phase from step 0 pairs record by record; a resumed phase starts at
    baseline_a's record of the step it resumed from, its first record being
    the one taken right after loading. Only the last phase must reach
    baseline_a's last record (`to_end`); the others stop where they saved.
    """
    if from_step == 0:
        return [
            (baseline[index] if index < len(baseline) else None, step, False)
            for index, step in enumerate(candidate)
        ]
    anchor = next((index for index, step in enumerate(baseline) if step.step == from_step), None)
    if anchor is None:
        raise TrajectoryError(
            f"baseline_a recorded no step {from_step} (a split step): call "
            "record() after every step so the round trip can be compared"
        )
    pairs = (
        zip_longest(baseline[anchor:], candidate)
        if to_end
        else zip(baseline[anchor:], candidate, strict=False)
    )
    return [
        (baseline_step, resumed_step, offset == 0)
        for offset, (baseline_step, resumed_step) in enumerate(pairs)
    ]


def _earliest(found: list[StepDivergence | None]) -> StepDivergence | None:
    """The first divergence in (step, rank) order; on ties the earlier candidate phase first."""
    present = [(index, divergence) for index, divergence in enumerate(found) if divergence]
    if not present:
        return None
    return min(present, key=lambda item: (item[1].step, item[1].rank, item[0]))[1]
