"""The candidate side of a resume check: one split, or a chain of resumes, each in a fresh process.

With `split_steps=(2, 4)` and `total_step=6` the candidate is three
processes: candidate_split trains 0→2 and saves, candidate_resume_1 loads
that checkpoint, trains 2→4 and saves, candidate_resume loads that and
trains 4→6. One split step gives the two phases check_resume always had.
`world_sizes` gives each candidate phase its rank count (the baselines run
on the first's): a chain that saves on 2 ranks and resumes on 1 is an
elastic resume. The rank count reaches the case as `plan.world_size`.
`layouts` gives each candidate phase a layout name the case reads as
`plan.layout` (a device mesh: "dp4", "dp2xtp2"): saving on one layout and
resuming on another at the same rank count is a layout change. A phase on
another world size or layout than the first is compared on the global state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainparity._internal.cases.loading import CaseSetupError, CaseSetupTypeError

__all__ = ["CandidatePhase", "candidate_chain", "chain_report", "on_another_layout"]


@dataclass(frozen=True)
class CandidatePhase:
    """One candidate process: trains from `from_step` (0: from scratch) to `end_step`."""

    name: str
    from_step: int
    end_step: int
    world_size: int | None  # None: the case's own rank count (no world_sizes given)
    layout: str | None = None  # None: the case's own layout (no layouts given)


def on_another_layout(phase: CandidatePhase, first: CandidatePhase) -> bool:
    """Whether `phase` ran on other ranks or another layout than the first (and the baselines)."""
    return (phase.world_size, phase.layout) != (first.world_size, first.layout)


def candidate_chain(
    split_steps: object, world_sizes: object, total_step: int, layouts: object = None
) -> tuple[CandidatePhase, ...]:
    """The candidate phases, checked; CaseSetupError/CaseSetupTypeError naming the input at fault."""
    steps = _ints(split_steps, "split_steps")
    if not steps:
        raise CaseSetupError("split_steps must hold at least one step", field="split_steps")
    bounds = (0, *steps, total_step)
    if any(bounds[index] >= bounds[index + 1] for index in range(len(bounds) - 1)):
        raise CaseSetupError(
            f"need 0 < split steps < total_step, strictly increasing; got split_steps "
            f"{list(steps)} and total_step {total_step}",
            field="split_steps",
        )
    names = [
        "candidate_split",
        *(f"candidate_resume_{index}" for index in range(1, len(steps))),
        "candidate_resume",
    ]
    sizes: tuple[int | None, ...] = (None,) * len(names)
    if world_sizes is not None:
        sizes = _ints(world_sizes, "world_sizes")
        if len(sizes) != len(names) or min(sizes) < 1:
            raise CaseSetupError(
                f"world_sizes needs one rank count >= 1 per candidate phase ({len(names)}: "
                f"{', '.join(names)}), got {list(sizes)}",
                field="world_sizes",
            )
    named: tuple[str | None, ...] = (None,) * len(names)
    if layouts is not None:
        named = _layout_names(layouts, len(names))
    return tuple(
        CandidatePhase(name, bounds[index], bounds[index + 1], sizes[index], named[index])
        for index, name in enumerate(names)
    )


def _layout_names(value: object, count: int) -> tuple[str, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise CaseSetupTypeError(
            f"layouts must be a sequence of layout names, got {value!r}", field="layouts"
        )
    if not all(isinstance(item, str) and item for item in value) or len(value) != count:
        raise CaseSetupError(
            f"layouts needs one non-empty layout name per candidate phase ({count}), "
            f"got {list(value)!r}",
            field="layouts",
        )
    return tuple(value)


def _ints(value: object, name: str) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise CaseSetupTypeError(f"{name} must be a sequence of ints, got {value!r}", field=name)
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise CaseSetupTypeError(f"{name} must hold ints, got {item!r}", field=name)
    return tuple(value)


def chain_report(chain: Sequence[CandidatePhase]) -> tuple[dict[str, Any], ...] | None:
    """The report's `resume_chain`: None for one split at the case's own rank count (a
    single-split check's report has no chain to describe)."""
    if len(chain) == 2 and all(
        phase.world_size is None and phase.layout is None for phase in chain
    ):
        return None
    return tuple(
        {
            "phase": phase.name,
            "from_step": phase.from_step,
            "end_step": phase.end_step,
            "world_size": phase.world_size,
            # Only where layouts were given: a chain without layouts has none to name.
            **({"layout": phase.layout} if phase.layout is not None else {}),
        }
        for phase in chain
    )
