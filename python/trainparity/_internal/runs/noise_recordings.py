"""check_runs' recordings under NoiseComparison: each variant's runs against the noise pair's spread.

The noise pair's runs (two repeats of one variant, or 1 against 2 threads)
are the samples; every other variant's runs are the candidates, aligned
record by record with them as check_runs aligns any two runs. Ranks are
judged rank by rank, each against the same rank of the samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.noise.walk import (
    EnvelopeEvent,
    EnvelopeWalk,
    Position,
    StepRow,
    closest_approach,
    earliest,
    first_noisy_step,
    sensitivity_line,
)
from trainparity._internal.recording.phase_recordings import PhaseRecordings, TrajectoryError
from trainparity._internal.recording.trajectory import StepComparison, StepDivergence

__all__ = ["RunsEnvelope"]


class RunsEnvelope(PhaseRecordings):
    """The recorded steps of one check_runs under NoiseComparison."""

    def __init__(self, run_root: Path, policy: NoiseComparison, samples: Sequence[str]) -> None:
        super().__init__(run_root, policy)  # type: ignore[arg-type]
        self.noise_policy = policy
        self.samples = tuple(samples)
        self.rows: list[StepRow] = []
        self.rank_count = 1

    def judge(self, candidates: Sequence[str]) -> EnvelopeEvent | None:
        """The first event of `candidates` (runs) against the samples; None when none (or nothing recorded)."""
        names = (*self.samples, *candidates)
        for name in names:
            self.read(name)
        if not any(self.recordings[name] for name in names):
            return None
        ranks = sorted(self.recordings[self.samples[0]])
        for name in names:
            if sorted(self.recordings[name]) != ranks:
                raise TrajectoryError(
                    f"{name} recorded ranks {sorted(self.recordings[name])} but "
                    f"{self.samples[0]} recorded {ranks}: under NoiseComparison every run is "
                    "judged rank by rank, so record() must run on the same ranks in every run"
                )
        self.rank_count = len(ranks)
        events = []
        for rank in ranks:
            walk = EnvelopeWalk(self.noise_policy, rank)
            events.append(walk.run(self._positions(rank, candidates)))
            self.rows.extend(walk.rows)
        event = earliest(found and found.with_rank_in_paths(len(ranks)) for found in events)
        if event is not None and event.kind == "candidate_left" and self.divergence is None:
            self.divergence = StepDivergence(
                step=event.step,
                rank=event.rank,
                baseline_phase=self.samples[0],
                candidate_phase=event.phase,
                candidate_step=event.step,
                round_trip=False,
                comparison=StepComparison(event.step, event.differences),
            )
        return event

    def _positions(self, rank: int, candidates: Sequence[str]) -> list[Position]:
        samples = {name: self.recordings[name][rank].steps for name in self.samples}
        runs = {name: self.recordings[name][rank].steps for name in candidates}
        reference = samples[self.samples[0]]
        for name in candidates:
            self.aligned(self.samples[0], name, rank, _pairs(reference, runs[name]))
        count = max(len(steps) for steps in samples.values())
        positions = []
        for index in range(count):
            positions.append(
                Position(
                    reference[index].step if index < len(reference) else index,
                    tuple(
                        (name, steps[index] if index < len(steps) else None)
                        for name, steps in samples.items()
                    ),
                    tuple(
                        (name, steps[index] if index < len(steps) else None, False)
                        for name, steps in runs.items()
                    ),
                )
            )
        for name, steps in runs.items():
            for record in steps[count:]:
                positions.append(Position(record.step, (), ((name, record, False),)))
        return positions

    def report(self) -> dict[str, Any]:
        return {
            "judged_on": "recorded steps",
            "samples": list(self.samples),
            "steps": [row.to_dict(self.rank_count) for row in self.rows],
            "closest_approach": closest_approach(self.rows, self.rank_count),
            "sensitivity": sensitivity_line(self.rows, first_noisy_step(self.rows)),
        }


def _pairs(reference: Sequence[Any], steps: Sequence[Any]) -> list[tuple[Any, Any, bool]]:
    length = max(len(reference), len(steps))
    return [
        (
            reference[index] if index < len(reference) else None,
            steps[index] if index < len(steps) else None,
            False,
        )
        for index in range(length)
    ]
