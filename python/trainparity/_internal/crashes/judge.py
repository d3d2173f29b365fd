"""Does a restarted job reproduce the uninterrupted run? Its records, step by step.

A job that resumes by itself records once right after loading (the step it
loaded) and after every step it redoes (docs/crashes.md). Each of those
records is compared with the uninterrupted run's record of the same step,
under the declared comparison: exactly, with a tolerance, or inside the
noise envelope of the uninterrupted runs (NoiseComparison). The first record
is what the restart loaded: a difference there is a state the uninterrupted
run never had (a torn or mixed checkpoint, or one saved between steps); a
difference later is a divergence after loading.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import ComparisonPolicy, Difference
from trainparity._internal.noise.envelope import NoiseMemory, judge_step
from trainparity._internal.recording.reader import RecordedStep, Recording
from trainparity._internal.recording.trajectory import compare_records
from trainparity._internal.state.paths import path_under

__all__ = ["BaselineSteps", "RestartJudgement"]


@dataclass(frozen=True)
class RestartJudgement:
    """What a restart's records showed. `divergence` is None when every record matched."""

    loaded_step: int | None  # the step of its first record (what it loaded); None: no record
    last_step: int | None
    divergence: str | None  # words for the report's row and the FAIL message
    difference: Difference | None
    at_step: int | None
    on_load: bool  # the first record already differs


class BaselineSteps:
    """The uninterrupted runs' records by rank and step, and for NoiseComparison the
    envelope's memory as it stands before each step (carried along the baseline)."""

    def __init__(self, policy: ComparisonPolicy, runs: Sequence[Mapping[int, Recording]]) -> None:
        self.policy = policy
        self.runs = runs
        self.ranks = sorted(runs[0])
        self.by_step: list[dict[int, dict[int, RecordedStep]]] = [
            {rank: _first_per_step(recording.steps) for rank, recording in run.items()}
            for run in runs
        ]
        self.memory_before: dict[int, dict[int, NoiseMemory]] = {}

    def last_step(self) -> int | None:
        steps = [step.step for step in self.runs[0][self.ranks[0]].steps] if self.ranks else []
        return steps[-1] if steps else None

    def disagreement(self) -> tuple[int, Difference] | None:
        """Where the uninterrupted runs themselves part (a path and its step), or None."""
        for rank in self.ranks:
            first = self.runs[0][rank].steps
            for other in self.runs[1:]:
                if rank not in other:
                    return 0, Difference(f"rank{rank}", "missing_candidate", "recorded", "absent")
                for left, right in zip(first, other[rank].steps, strict=False):
                    found = self._sample_differences(rank, left, right)
                    if found:
                        return left.step, self._named(rank, found[0])
                if len(first) != len(other[rank].steps):
                    step = min(len(first), len(other[rank].steps))
                    return step, Difference(
                        "step", "record_count", str(len(first)), str(len(other[rank].steps))
                    )
        return None

    def _sample_differences(
        self, rank: int, left: RecordedStep, right: RecordedStep
    ) -> tuple[Difference, ...]:
        if isinstance(self.policy, NoiseComparison):
            samples = self._samples(rank, left.step)
            judged = judge_step(self.policy, samples, None, self._memory(rank, left.step))
            return tuple(difference for _, difference in judged.sample_differences)
        return compare_records(self.policy, left, right).differences

    def _samples(self, rank: int, step: int) -> list[object]:
        """Each uninterrupted run's record of `step` on `rank`, as snapshots (the envelope's samples)."""
        return [
            by_rank[rank][step].snapshot()
            for by_rank in self.by_step
            if step in by_rank.get(rank, {})
        ]

    def _memory(self, rank: int, step: int) -> NoiseMemory:
        """A copy of the envelope's memory before `step` (built once along the baselines)."""
        if rank not in self.memory_before:
            memory = NoiseMemory()
            before: dict[int, NoiseMemory] = {}
            for recorded in self.runs[0][rank].steps:
                if recorded.step in before:
                    continue
                before[recorded.step] = copy.deepcopy(memory)
                samples = self._samples(rank, recorded.step)
                judge_step(self.policy, samples, None, memory)  # type: ignore[arg-type]
            self.memory_before[rank] = before
        found = self.memory_before[rank].get(step)
        return copy.deepcopy(found) if found is not None else NoiseMemory()

    def _named(self, rank: int, difference: Difference) -> Difference:
        if len(self.ranks) < 2:
            return difference
        return Difference(
            path_under(f"rank{rank}", difference.path),
            difference.reason,
            difference.baseline,
            difference.candidate,
        )

    def judge(self, restart: Mapping[int, Recording]) -> RestartJudgement:
        """Compare every record of a restart with the uninterrupted record of the same step."""
        loaded = last = None
        for rank in self.ranks:
            steps = restart.get(rank)
            records = steps.steps if steps is not None else ()
            if not records:
                continue
            loaded = records[0].step if loaded is None else loaded
            last = records[-1].step
            memory = self._memory(rank, records[0].step) if self._noise else None
            for index, record in enumerate(records):
                found = self._candidate_differences(rank, record, memory)
                if found:
                    on_load = index == 0
                    difference = self._named(rank, found[0])
                    final = self.last_step()
                    if difference.reason == "missing_baseline" and final is not None:
                        past = record.step > final
                        words = (
                            f"the restart went on to step {record.step}, past the uninterrupted "
                            f"run's last step {final}"
                            if past
                            else f"the restart recorded step {record.step}, which the "
                            f"uninterrupted run never recorded"
                        )
                    elif on_load:
                        words = (
                            f"the restart loaded a state the uninterrupted run never had: at "
                            f"step {record.step} it differs at {difference.path} (a torn or "
                            f"mixed checkpoint, or one saved between steps)"
                        )
                    else:
                        words = (
                            f"the restart diverges after loading step {records[0].step}: "
                            f"step {record.step} differs at {difference.path}"
                        )
                    return RestartJudgement(loaded, last, words, difference, record.step, on_load)
        return RestartJudgement(loaded, last, None, None, None, False)

    @property
    def _noise(self) -> bool:
        return isinstance(self.policy, NoiseComparison)

    def _candidate_differences(
        self, rank: int, record: RecordedStep, memory: NoiseMemory | None
    ) -> tuple[Difference, ...]:
        baseline = self.by_step[0].get(rank, {}).get(record.step)
        if baseline is None:
            return (
                Difference(
                    "step",
                    "missing_baseline",
                    "(not a step of the uninterrupted run)",
                    str(record.step),
                ),
            )
        if isinstance(self.policy, NoiseComparison):
            samples = self._samples(rank, record.step)
            return judge_step(self.policy, samples, record.snapshot(), memory).differences
        return compare_records(self.policy, baseline, record).differences


def _first_per_step(steps: Sequence[RecordedStep]) -> dict[int, RecordedStep]:
    found: dict[int, RecordedStep] = {}
    for recorded in steps:
        found.setdefault(recorded.step, recorded)
    return found
