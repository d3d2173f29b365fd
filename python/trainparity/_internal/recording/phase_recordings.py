"""The recordings of one check's children: read on demand, reported the same way by every check.

Each child of a check records into `<run root>/recordings/<child name>/`
(one file per rank). check_resume (`resume/recordings.py`) and check_runs
(`runs/recordings.py`) align the records differently; what they share is
here: reading (a recording that cannot be read makes the verdict ERROR),
and the report keys `trajectory` and `final_state_differences`. When two
children part, `trajectory.drift` is the drift curve of that pair, on the
rank that parted first: how fast the difference grows after it appears.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trainparity._internal.comparison.policies import ComparisonPolicy, Difference
from trainparity._internal.recording.reader import RecordedStep, Recording, read_recordings
from trainparity._internal.recording.trajectory import StepDivergence, drift_curve, recorded_steps
from trainparity._internal.recording.variables import PHASE_VARIABLE, RECORD_VARIABLE
from trainparity._internal.state.paths import path_under
from trainparity._internal.why.likely_cause import scalar_leaves

# (baseline record, candidate record, round trip): one aligned position of two children.
AlignedPair = tuple[RecordedStep | None, RecordedStep | None, bool]

__all__ = [
    "RECORDINGS_DIRECTORY",
    "PhaseRecordings",
    "TrajectoryError",
    "recording_directory",
    "recording_environment",
]

RECORDINGS_DIRECTORY = "recordings"


class TrajectoryError(Exception):
    """Recordings that exist but cannot be used: unreadable, or missing from some children."""


def recording_directory(run_root: Path, child: str) -> Path:
    """Where `record()` in a child's process writes (recording_environment points it there)."""
    return run_root / RECORDINGS_DIRECTORY / child


def recording_environment(run_root: Path, child: str) -> dict[str, str]:
    """Variables that make `record()` in a child's process write to that child's directory."""
    return {RECORD_VARIABLE: str(recording_directory(run_root, child)), PHASE_VARIABLE: child}


class PhaseRecordings:
    """The recordings of one check's children, each read once, when the decisions need it.

    `divergence` is the one the verdict reports; subclasses set it, and register
    the aligned records of each pair they compare with `aligned`.
    """

    def __init__(self, run_root: Path, policy: ComparisonPolicy) -> None:
        self.root = run_root / RECORDINGS_DIRECTORY
        self.policy = policy
        self.recordings: dict[str, dict[int, Recording]] = {}
        self.divergence: StepDivergence | None = None
        self._aligned: dict[tuple[str, str, int], list[AlignedPair]] = {}
        # Per child compared on the global state (another world size): how it was compared.
        self.compared_on: dict[str, str] = {}

    def aligned(
        self, baseline: str, candidate: str, rank: int, pairs: Iterable[AlignedPair]
    ) -> list[AlignedPair]:
        """`pairs` as a list, kept so the drift of the pair that parts can be drawn."""
        listed = list(pairs)
        self._aligned[(baseline, candidate, rank)] = listed
        return listed

    @property
    def recorded(self) -> bool:
        return any(self.recordings.values())

    def report_fields(self, final_differences: tuple[Difference, ...]) -> dict[str, Any]:
        """The report keys recordings add (none when the children do not record)."""
        if not self.recorded:
            return {}
        ranks = sorted({rank for child in self.recordings.values() for rank in child})
        return {
            "trajectory": {
                "ranks": ranks,
                "recorded_steps": {
                    child: recorded_steps(recordings, several_ranks=len(ranks) > 1)
                    for child, recordings in self.recordings.items()
                    if recordings
                },
                "first_divergence": None if self.divergence is None else self.divergence.to_dict(),
                **self._drift(),
                **({"compared_on": dict(self.compared_on)} if self.compared_on else {}),
            },
            "final_state_differences": final_differences,
        }

    def _drift(self) -> dict[str, Any]:
        divergence = self.divergence
        if divergence is None:
            return {}
        key = (divergence.baseline_phase, divergence.candidate_phase, divergence.rank)
        return {"drift": drift_curve(self._aligned.get(key, ()))}

    def scalar_records(self, child: str) -> list[dict[str, object]]:
        """The values that are not tensors in each record a child made, by path (likely_cause's input).

        With several ranks each rank's paths are under `rank{R}`, as the
        verdict names them. Empty when the child recorded nothing.
        """
        recordings = self.recordings.get(child) or {}
        several_ranks = len(recordings) > 1
        return [
            {
                path_under(f"rank{rank}", path) if several_ranks else path: value
                for path, value in scalar_leaves(step.state).items()
            }
            for rank, recording in recordings.items()
            for step in recording.steps
        ]

    def read(self, child: str) -> dict[int, Recording]:
        """A child's recording per rank (ranks that recorded no step left out); read once."""
        if child not in self.recordings:
            try:
                recordings = read_recordings(self.root / child)
            except Exception as error:  # RecordingError, OSError: the verdict is ERROR
                raise TrajectoryError(f"{child} recording is unreadable: {error}") from None
            self.recordings[child] = {
                rank: recording for rank, recording in recordings.items() if recording.steps
            }
        return self.recordings[child]
