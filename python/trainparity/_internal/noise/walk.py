"""Recorded steps judged against the noise envelope, step by step, in step order.

A check lines its recordings up into positions: at each baseline record,
the samples (the uninterrupted runs' records of that step, and any other
run that is one more sample there, like candidate_split before its save)
and the candidates' records aligned with it. Each position is judged by
noise/envelope.py; the walk stops at the first position that decides
(`step_event`, which also decides a check that judges one step alone):

- samples that disagree where the envelope holds values exact, or whose
  noise exceeds `max_noise`: the check abstains;
- a candidate with a difference or an envelope exit: the check fails.

Every judged step leaves a row for the report: per component the largest
noise, excursion and limit, and the path closest to (or past) the limit.
A record is anything with a `step` and a `snapshot()`: a recording's step,
or a final state standing in for one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import MISSING, Difference
from trainparity._internal.noise.envelope import NoiseMemory, PathEnvelope, StepEnvelope, judge_step
from trainparity._internal.state.paths import component_of, path_under
from trainparity._internal.state.snapshot import Snapshot

__all__ = [
    "EnvelopeEvent",
    "EnvelopeWalk",
    "Position",
    "StepRecord",
    "StepRow",
    "closest_approach",
    "earliest",
    "final_state_envelope",
    "first_noisy_step",
    "sensitivity_line",
    "step_event",
]


class StepRecord(Protocol):
    """One recorded step as the walk reads it."""

    @property
    def step(self) -> int: ...

    def snapshot(self) -> Snapshot: ...


@dataclass(frozen=True)
class Position:
    """One aligned step: named sample records and named candidate records (None: missing)."""

    step: int
    samples: tuple[tuple[str, StepRecord | None], ...]
    candidates: tuple[tuple[str, StepRecord | None, bool], ...] = ()  # (name, record, round trip)


@dataclass(frozen=True)
class EnvelopeEvent:
    """What decided: `kind` is "samples_differ", "too_noisy" or "candidate_left"."""

    kind: str
    step: int
    rank: int
    phase: str  # the sample that disagreed, or the candidate that left
    differences: tuple[Difference, ...]
    entry: PathEnvelope | None = None  # the envelope numbers of the first exit or the noisiest path
    round_trip: bool = False

    def with_rank_in_paths(self, ranks: int) -> EnvelopeEvent:
        if ranks < 2:
            return self
        key = f"rank{self.rank}"
        import dataclasses

        return dataclasses.replace(
            self,
            differences=tuple(
                dataclasses.replace(found, path=path_under(key, found.path))
                for found in self.differences
            ),
            entry=None
            if self.entry is None
            else dataclasses.replace(self.entry, path=path_under(key, self.entry.path)),
        )


@dataclass
class StepRow:
    """One judged step of one candidate (or of the samples alone) for the report."""

    step: int
    rank: int
    phase: str | None
    noise: dict[str, float] = field(default_factory=dict)  # component -> largest relative noise
    excursion: dict[str, float] = field(default_factory=dict)
    limit: dict[str, float] = field(default_factory=dict)
    worst: PathEnvelope | None = None
    unmeasured: int = 0

    @classmethod
    def of(cls, step: int, rank: int, phase: str | None, paths: Iterable[PathEnvelope]) -> StepRow:
        """The row of one judged step's paths: per component the largest of each number.

        Each number is a path's absolute value relative to its component's norm
        (all its judged paths as one vector), so a path of near-zero norm, whose
        own relative numbers are huge, weighs as little as it holds. A component
        whose norms were not read keeps its paths' own relative numbers.
        """
        row = cls(step, rank, phase)
        entries = list(paths)
        squares: dict[str, float] = {}
        for entry in entries:
            component = component_of(entry.path)
            squares[component] = squares.get(component, 0.0) + entry.scale**2
        for entry in entries:
            component = component_of(entry.path)
            norm = math.sqrt(squares[component])
            weight = entry.scale / norm if norm > 0 and entry.scale > 0 else 1.0
            row.noise[component] = max(row.noise.get(component, 0.0), entry.noise * weight)
            row.limit[component] = max(row.limit.get(component, 0.0), entry.limit * weight)
            if entry.excursion is not None:
                row.excursion[component] = max(
                    row.excursion.get(component, 0.0), entry.excursion * weight
                )
        return row

    def to_dict(self, ranks: int) -> dict[str, Any]:
        worst = None
        if self.worst is not None:
            worst = self.worst.to_dict()
            if ranks > 1:
                worst["path"] = path_under(f"rank{self.rank}", worst["path"])
        return {
            "step": self.step,
            "rank": self.rank,
            "candidate": self.phase,
            "noise": dict(sorted(self.noise.items())),
            "excursion": dict(sorted(self.excursion.items())),
            "limit": dict(sorted(self.limit.items())),
            "largest_ratio": worst,
            **({"unmeasured_paths": self.unmeasured} if self.unmeasured else {}),
        }


class EnvelopeWalk:
    """Judges positions of one rank in order; `event` is the first decision, `rows` the steps seen.

    `memory` starts the walk with what earlier steps measured (the final states
    after a recorded trajectory); default: nothing yet.
    """

    def __init__(
        self, policy: NoiseComparison, rank: int, memory: NoiseMemory | None = None
    ) -> None:
        self.policy = policy
        self.rank = rank
        self.rows: list[StepRow] = []
        self.event: EnvelopeEvent | None = None
        self.noise_so_far = memory if memory is not None else NoiseMemory()

    def run(self, positions: Iterable[Position]) -> EnvelopeEvent | None:
        for position in positions:
            self.event = self._judge(position)
            if self.event is not None:
                break
        return self.event

    def _judge(self, position: Position) -> EnvelopeEvent | None:
        if not position.samples:  # candidate records past the baselines' last one
            name, record, _ = position.candidates[0]
            claimed = MISSING if record is None else repr(record.step)
            return EnvelopeEvent(
                "candidate_left",
                position.step,
                self.rank,
                name,
                (Difference("step", "missing_baseline", MISSING, claimed),),
            )
        present = [(name, record) for name, record in position.samples if record is not None]
        missing = [name for name, record in position.samples if record is None]
        if missing:
            reference = present[0][1] if present else None
            return EnvelopeEvent(
                "samples_differ",
                position.step,
                self.rank,
                missing[0],
                (
                    Difference(
                        "step",
                        "missing_candidate",
                        repr(reference.step) if reference else MISSING,
                        MISSING,
                    ),
                ),
            )
        samples = [record.snapshot() for _, record in present]
        names = [name for name, _ in present]
        if not position.candidates:
            judged = judge_step(self.policy, samples, noise_so_far=self.noise_so_far)
            self._row(position.step, None, judged)
            return step_event(self.policy, judged, position.step, self.rank, names)
        for name, record, round_trip in position.candidates:
            if record is None:
                return EnvelopeEvent(
                    "candidate_left",
                    position.step,
                    self.rank,
                    name,
                    (Difference("step", "missing_candidate", repr(position.step), MISSING),),
                    round_trip=round_trip,
                )
            judged = judge_step(
                self.policy, samples, record.snapshot(), noise_so_far=self.noise_so_far
            )
            self._row(position.step, name, judged)
            event = step_event(
                self.policy, judged, position.step, self.rank, names, (name, round_trip)
            )
            if event is not None:
                return event
        return None

    def _row(self, step: int, phase: str | None, judged: StepEnvelope) -> None:
        row = StepRow.of(step, self.rank, phase, judged.paths)
        row.unmeasured = len(judged.unmeasured)
        row.worst = judged.worst()
        self.rows.append(row)


def step_event(
    policy: NoiseComparison,
    judged: StepEnvelope,
    step: int,
    rank: int,
    names: Sequence[str],
    candidate: tuple[str, bool] | None = None,
) -> EnvelopeEvent | None:
    """What one judged step decides, in the order every check decides it; None: nothing.

    `names` name the samples in judge_step's order; `candidate` is (name,
    round trip) of the candidate judged with them. Samples that disagree
    where values are held exact come first, then noise above `max_noise`,
    then the candidate's first difference or envelope exit.
    """
    if judged.sample_differences:
        index, found = judged.sample_differences[0]
        same_sample = tuple(d for i, d in judged.sample_differences if i == index)
        return EnvelopeEvent("samples_differ", step, rank, names[index], same_sample or (found,))
    noisy = judged.too_noisy(policy.max_noise)
    if noisy is not None:
        return EnvelopeEvent(
            "too_noisy",
            step,
            rank,
            names[0],
            (Difference(noisy.path, "noise_above_max_noise", "", ""),),
            entry=noisy,
        )
    if candidate is None or not judged.differences:
        return None
    name, round_trip = candidate
    first = judged.differences[0].path
    return EnvelopeEvent(
        "candidate_left",
        step,
        rank,
        name,
        judged.differences,
        entry=next((e for e in judged.paths if e.outside and e.path == first), None),
        round_trip=round_trip,
    )


def earliest(events: Iterable[EnvelopeEvent | None]) -> EnvelopeEvent | None:
    present = [event for event in events if event is not None]
    return min(present, key=lambda event: (event.step, event.rank)) if present else None


def closest_approach(rows: Iterable[StepRow], ranks: int) -> dict[str, Any] | None:
    """The candidate's largest excursion/noise ratio over every judged step, and where."""
    best: StepRow | None = None
    for row in rows:
        if row.phase is None or row.worst is None or row.worst.ratio is None:
            continue
        if best is None or row.worst.ratio > best.worst.ratio:  # type: ignore[union-attr]
            best = row
    if best is None:
        return None
    assert best.worst is not None
    path = best.worst.path if ranks < 2 else path_under(f"rank{best.rank}", best.worst.path)
    return {
        "ratio": best.worst.ratio,
        "step": best.step,
        "path": path,
        "candidate": best.phase,
        "excursion": best.worst.excursion,
        "noise": best.worst.noise,
    }


def first_noisy_step(rows: Sequence[StepRow]) -> int | None:
    """The first step a candidate was judged at where the samples differed (else the first judged)."""
    judged = [row for row in rows if row.phase is not None]
    noisy = [row.step for row in judged if any(value > 0 for value in row.noise.values())]
    if noisy:
        return min(noisy)
    return min((row.step for row in judged), default=None)


def sensitivity_line(rows: Sequence[StepRow], step: int | None) -> str | None:
    """What the check could have seen at `step` (its first candidate step): per component the limit."""
    at_step = [row for row in rows if row.phase is not None and row.step == step]
    if not at_step:
        return None
    limits: dict[str, float] = {}
    for row in at_step:
        for component, limit in row.limit.items():
            limits[component] = max(limits.get(component, 0.0), limit)
    measured = [
        f"{component}.* by more than {_number(limit)}"
        for component, limit in sorted(limits.items())
        if limit > 0
    ]
    if not measured:
        return (
            f"at step {step} every path was judged bit for bit (the uninterrupted runs agreed "
            "there): any change would have been seen"
        )
    return (
        f"a fault that changes a tensor of {', or of '.join(measured)} (L2, relative to the "
        f"norm of the component) at step {step} would have been seen; every other path was "
        "judged bit for bit"
    )


def _number(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.2g}"


class _Final:
    """A final-state snapshot standing in for a record in an envelope walk."""

    def __init__(self, snapshot: Snapshot, step: int) -> None:
        self._snapshot = snapshot
        self.step = step

    def snapshot(self) -> Snapshot:
        return self._snapshot


def final_state_envelope(
    policy: NoiseComparison,
    samples: Sequence[tuple[str, Snapshot]],
    candidates: Sequence[tuple[str, Snapshot]],
    total_step: int,
    memory: NoiseMemory | None = None,
) -> tuple[EnvelopeEvent | None, dict[str, Any]]:
    """The envelope judgment of final states: event and report.

    Without record() they are all there is; after a recorded trajectory,
    `memory` carries its noise (the last step's baselines may agree bit for bit
    where an earlier one, or candidate_split before its save, did not).
    """
    walk = EnvelopeWalk(policy, 0, memory)
    position = Position(
        total_step,
        tuple((name, _Final(snapshot, total_step)) for name, snapshot in samples),  # type: ignore[misc]
        tuple((name, _Final(snapshot, total_step), False) for name, snapshot in candidates),  # type: ignore[misc]
    )
    event = walk.run([position])
    report = {
        "judged_on": "final states",
        "samples": [name for name, _ in samples],
        "steps": [row.to_dict(1) for row in walk.rows],
        "closest_approach": closest_approach(walk.rows, 1),
        "sensitivity": sensitivity_line(walk.rows, total_step),
    }
    return event, report
