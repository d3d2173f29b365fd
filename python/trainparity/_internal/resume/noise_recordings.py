"""check_resume's recordings under NoiseComparison: every candidate step against the baselines' spread.

Positions (noise/walk.py) follow baseline_a's records. At each
of them the samples are every baseline's record of that position and,
up to its save, candidate_split's: before the split it is one more
uninterrupted run, so it measures noise and is never judged. The resumed
phases are aligned as under the exact comparison (resume/recordings.py): each
one's first record, taken right after loading, at the step it resumed from,
then record by record.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.noise.envelope import NoiseMemory
from trainparity._internal.noise.walk import (
    EnvelopeEvent,
    EnvelopeWalk,
    Position,
    StepRow,
    closest_approach,
    earliest,
    sensitivity_line,
)
from trainparity._internal.recording.phase_recordings import PhaseRecordings, TrajectoryError
from trainparity._internal.recording.trajectory import StepComparison, StepDivergence
from trainparity._internal.resume.recordings import aligned_records

__all__ = ["ResumeEnvelope"]


class ResumeEnvelope(PhaseRecordings):
    """The recorded steps of one check_resume under NoiseComparison."""

    def __init__(
        self,
        run_root: Path,
        policy: NoiseComparison,
        baselines: Sequence[str],
        candidates: Sequence[tuple[str, int, bool]],
    ) -> None:
        super().__init__(run_root, policy)  # type: ignore[arg-type]
        self.noise_policy = policy
        self.baselines = tuple(baselines)
        self.candidates = tuple(candidates)
        self.rows: list[StepRow] = []
        self.event: EnvelopeEvent | None = None
        self.rank_count = 1
        self.memories: dict[int, NoiseMemory] = {}  # per rank: what its walk measured

    def judge(self) -> EnvelopeEvent | None:
        """Read every phase's recording and walk the steps; None when nothing decided (or recorded)."""
        for name in (*self.baselines, *(phase for phase, _, _ in self.candidates)):
            self.read(name)
        if not self.recorded:
            return None
        for phase, _, elastic in self.candidates:
            if elastic:
                raise TrajectoryError(
                    f"{phase} ran on another rank count than the baselines: NoiseComparison "
                    "judges a candidate rank by rank against the same ranks of the baselines; "
                    "check an elastic resume with ExactComparison or ToleranceComparison"
                )
        reference = self.baselines[0]
        ranks = sorted(self.recordings[reference])
        for name in (*self.baselines, *(phase for phase, _, _ in self.candidates)):
            if sorted(self.recordings[name]) != ranks:
                raise TrajectoryError(
                    f"{name} recorded ranks {sorted(self.recordings[name])} but {reference} "
                    f"recorded {ranks}: record() must run in every phase"
                )
        self.rank_count = len(ranks)
        events = []
        for rank in ranks:
            walk = EnvelopeWalk(self.noise_policy, rank)
            events.append(walk.run(self._positions(rank)))
            self.rows.extend(walk.rows)
            self.memories[rank] = walk.noise_so_far
        self.event = earliest(event and event.with_rank_in_paths(len(ranks)) for event in events)
        if self.event is not None and self.event.kind == "candidate_left":
            self.divergence = _as_divergence(self.event, reference)
        return self.event

    def _positions(self, rank: int) -> list[Position]:
        reference = self.recordings[self.baselines[0]][rank].steps
        steps = {name: self.recordings[name][rank].steps for name in self.baselines}
        split_name = self.candidates[0][0]
        split = self.recordings[split_name][rank].steps
        count = max(len(records) for records in steps.values())
        at: dict[int, list[tuple[str, Any, bool]]] = {}
        index_of = {id(record): index for index, record in enumerate(reference)}
        overflow: list[tuple[str, Any]] = []
        last = self.candidates[-1][0]
        for phase, from_step, _ in self.candidates[1:]:
            records = self.recordings[phase][rank].steps
            pairs = aligned_records(reference, records, from_step, to_end=phase == last)
            self.aligned(self.baselines[0], phase, rank, pairs)
            for baseline_record, record, round_trip in pairs:
                if baseline_record is None:
                    overflow.append((phase, record))
                else:
                    at.setdefault(index_of[id(baseline_record)], []).append(
                        (phase, record, round_trip)
                    )
        if len(split) > len(reference):
            overflow.extend((split_name, record) for record in split[len(reference) :])
        positions = []
        for index in range(count):
            samples = [
                (name, records[index] if index < len(records) else None)
                for name, records in steps.items()
            ]
            if index < len(split):
                samples.append((split_name, split[index]))
            step = reference[index].step if index < len(reference) else index
            positions.append(Position(step, tuple(samples), tuple(at.get(index, ()))))
        for phase, record in overflow:
            positions.append(
                Position(
                    record.step,
                    (),
                    ((phase, record, False),),
                )
            )
        return positions

    def final_state_memory(self) -> NoiseMemory | None:
        """The recorded noise the final states are judged with: one rank's walk, as final
        states of a one-rank job hold its paths; several ranks: only that the run was noisy."""
        if len(self.memories) == 1:
            return next(iter(self.memories.values()))
        memory = NoiseMemory()
        memory.noisy = any(walked.noisy for walked in self.memories.values())
        return memory

    def report(self) -> dict[str, Any]:
        """The report's `noise_envelope` entries drawn from the recorded steps."""
        first_candidate_step = min(
            (row.step for row in self.rows if row.phase is not None), default=None
        )
        return {
            "judged_on": "recorded steps",
            "samples": [*self.baselines, f"{self.candidates[0][0]} (up to its save)"],
            "steps": [row.to_dict(self.rank_count) for row in self.rows],
            "closest_approach": closest_approach(self.rows, self.rank_count),
            "sensitivity": sensitivity_line(self.rows, first_candidate_step),
        }


def _as_divergence(event: EnvelopeEvent, baseline: str) -> StepDivergence:
    return StepDivergence(
        step=event.step,
        rank=event.rank,
        baseline_phase=baseline,
        candidate_phase=event.phase,
        candidate_step=event.step,
        round_trip=event.round_trip,
        comparison=StepComparison(event.step, event.differences),
    )
