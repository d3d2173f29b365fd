"""check_runs' use of recordings: every run records into its own directory; runs are compared record by record.

Two runs of check_runs train the same schedule, so their records align one
by one (a claimed step that differs is itself a difference, at path `step`).
Ranks are compared rank by rank where both runs have them; a variant with
fewer ranks (2 ranks against 1) is compared on the ranks it has, since every
rank of a data-parallel job holds the same replicated state. When two ranks
or more are compared, difference paths name their rank (`rank1.model.weight`).
"""

from __future__ import annotations

from itertools import zip_longest
from pathlib import Path
from typing import Any

from trainparity.comparison import ComparisonPolicy, Difference
from trainparity.recording.reader import Recording, read_recordings
from trainparity.recording.recorder import PHASE_VARIABLE, RECORD_VARIABLE
from trainparity.recording.resume import RECORDINGS_DIRECTORY, TrajectoryError
from trainparity.recording.trajectory import (
    StepDivergence,
    first_divergence,
    rank_named,
    recorded_steps,
)

__all__ = ["RunsTrajectories", "run_recording_environment"]


def run_recording_environment(run_root: Path, run: str) -> dict[str, str]:
    """Variables that make `record()` in a run's process write to that run's directory."""
    return {RECORD_VARIABLE: str(run_root / RECORDINGS_DIRECTORY / run), PHASE_VARIABLE: run}


class RunsTrajectories:
    """The recordings of one check_runs, read when the decision sequence needs them."""

    def __init__(self, run_root: Path, policy: ComparisonPolicy) -> None:
        self.root = run_root / RECORDINGS_DIRECTORY
        self.policy = policy
        self.recordings: dict[str, dict[int, Recording]] = {}
        self.divergence: StepDivergence | None = None

    def part(self, baseline_run: str, candidate_run: str) -> StepDivergence | None:
        """The first record at which two runs differ; None when equal or when neither recorded."""
        baseline, candidate = self._read(baseline_run), self._read(candidate_run)
        if not baseline and not candidate:
            return None
        for silent, other in ((baseline_run, candidate_run), (candidate_run, baseline_run)):
            if not self.recordings[silent]:
                raise TrajectoryError(
                    f"{silent} recorded no step but {other} did: record() must run in every run"
                )
        ranks = sorted(set(baseline) & set(candidate))
        if not ranks:
            raise TrajectoryError(
                f"{baseline_run} recorded ranks {sorted(baseline)} and {candidate_run} "
                f"ranks {sorted(candidate)}: no rank to compare"
            )
        found = [
            first_divergence(
                self.policy,
                (
                    (a, b, False)
                    for a, b in zip_longest(baseline[rank].steps, candidate[rank].steps)
                ),
                rank=rank,
                baseline_phase=baseline_run,
                candidate_phase=candidate_run,
            )
            for rank in ranks
        ]
        present = [divergence for divergence in rank_named(found, len(ranks)) if divergence]
        divergence = min(present, key=lambda d: (d.step, d.rank)) if present else None
        if divergence is not None and self.divergence is None:
            self.divergence = divergence  # the one the verdict reports
        return divergence

    @property
    def recorded(self) -> bool:
        return any(self.recordings.values())

    def report_fields(self, final_differences: tuple[Difference, ...]) -> dict[str, Any]:
        """The report keys recordings add (none when the runs do not record)."""
        if not self.recorded:
            return {}
        ranks = sorted({rank for run in self.recordings.values() for rank in run})
        return {
            "trajectory": {
                "ranks": ranks,
                "recorded_steps": {
                    run: recorded_steps(recordings, several_ranks=len(ranks) > 1)
                    for run, recordings in self.recordings.items()
                    if recordings
                },
                "first_divergence": None if self.divergence is None else self.divergence.to_dict(),
            },
            "final_state_differences": final_differences,
        }

    def _read(self, run: str) -> dict[int, Recording]:
        if run not in self.recordings:
            try:
                recordings = read_recordings(self.root / run)
            except Exception as error:  # RecordingError, OSError: the verdict is ERROR
                raise TrajectoryError(f"{run} recording is unreadable: {error}") from None
            self.recordings[run] = {
                rank: recording for rank, recording in recordings.items() if recording.steps
            }
        return self.recordings[run]
