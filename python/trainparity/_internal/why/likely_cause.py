"""Among many differences, the likely cause: a differing value that training itself does not change.

When two final states differ in many places, the first path in traversal
order is often a downstream effect (docs/compatibility.md, "check_resume"). A constructor argument
that differs (a scheduler's `T_max` taken from the run's own end step) makes
every tensor after it differ; it is the one difference that explains the
others. "Constant" is judged on the baseline's own trajectory: a value equal in
every record of the baseline, when the run calls record(); without records,
a value that is not a tensor (an int, str or bool ranks before a float, which
is more often computed from them, like a learning rate from a schedule).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from trainparity._internal.comparison.policies import Difference
from trainparity._internal.state.freeze import (
    FrozenMapping,
    FrozenSequence,
    FrozenTensor,
    FrozenValue,
)
from trainparity._internal.state.paths import render_path

__all__ = [
    "CONSTANT_IN_EACH_RUN",
    "CONSTANT_IN_RECORDS",
    "NOT_A_TENSOR",
    "LikelyCause",
    "likely_cause",
    "scalar_leaves",
    "setting_cause",
]

# Why a difference is the likely cause: its `basis`.
CONSTANT_IN_RECORDS = "constant_in_records"  # equal in every record of the baseline
NOT_A_TENSOR = "not_a_tensor"  # no records to tell: a value that is not a tensor
# Each of two runs that should agree holds it constant, at another value: a setting.
CONSTANT_IN_EACH_RUN = "constant_in_each_run"


@dataclass(frozen=True)
class LikelyCause:
    """The difference a report names first, under "likely cause", and why."""

    path: str
    baseline: str
    candidate: str
    basis: str


def likely_cause(
    differences: Sequence[Difference],
    baseline_state: FrozenValue,
    baseline_records: Sequence[Mapping[str, object]] = (),
) -> LikelyCause | None:
    """The likely cause among `differences` (in traversal order); None when one or none differ.

    `baseline_state` is the baseline's tree that `differences` were found in,
    `baseline_records` the baseline's recorded states as scalar_leaves
    mappings (empty without record()). A recorded value that is not equal in
    every record holding it changes along training, so it is no cause.
    """
    if len(differences) < 2:
        return None
    candidates = [item for item in differences if item.reason == "value"]
    recorded = [item for item in candidates if any(item.path in rec for rec in baseline_records)]
    constant = [item for item in recorded if _constant(item.path, baseline_records)]
    if constant:
        return _cause(constant[0], CONSTANT_IN_RECORDS)
    leaves = scalar_leaves(baseline_state)
    unrecorded = [item for item in candidates if item not in recorded]
    # Settings and counters (int, str, bool) before floats, which are usually computed from them.
    ranked = sorted(unrecorded, key=lambda item: isinstance(leaves.get(item.path), float))
    return _cause(ranked[0], NOT_A_TENSOR) if ranked else None


def setting_cause(
    differences: Sequence[Difference],
    baseline_records: Sequence[Mapping[str, object]],
    candidate_records: Sequence[Mapping[str, object]],
) -> LikelyCause | None:
    """Why two runs that should agree part (an ABSTAIN), when it is a setting, not noise.

    The first differing value that each run holds constant in every record
    it made (two records at least): the runs were given it differently (a
    scheduler's `T_max` computed from the run's own end step), which no
    nondeterminism of training produces. One such difference is enough; None
    when none is, or a side recorded nothing.
    """
    for item in differences:
        if item.reason != "value":
            continue
        if _held(item.path, baseline_records) and _held(item.path, candidate_records):
            return _cause(item, CONSTANT_IN_EACH_RUN)
    return None


def _held(path: str, records: Sequence[Mapping[str, object]]) -> bool:
    """Whether at least two records hold `path`, all at one value."""
    values = [record[path] for record in records if path in record]
    return len(values) >= 2 and _constant(path, records)


def scalar_leaves(tree: FrozenValue) -> dict[str, object]:
    """Every leaf of a frozen tree that is not a tensor, by its rendered path."""
    return {render_path(path): value for path, value in _leaves(tree)}


def _leaves(tree: FrozenValue) -> Iterator[tuple[tuple[str | int, ...], object]]:
    stack: list[tuple[FrozenValue, tuple[str | int, ...]]] = [(tree, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, FrozenMapping):
            stack.extend((value, (*path, key)) for key, value in node.entries)
        elif isinstance(node, FrozenSequence):
            stack.extend((value, (*path, index)) for index, value in enumerate(node.items))
        elif not isinstance(node, FrozenTensor):
            yield path, node


def _constant(path: str, records: Sequence[Mapping[str, object]]) -> bool:
    """Whether every record that holds `path` holds the same value there."""
    values = [record[path] for record in records if path in record]
    return all(_same(value, values[0]) for value in values)


def _same(left: object, right: object) -> bool:
    if type(left) is not type(right):
        return False
    if isinstance(left, float) and math.isnan(left):
        return math.isnan(right)  # type: ignore[arg-type]
    return left == right


def _cause(difference: Difference, basis: str) -> LikelyCause:
    return LikelyCause(difference.path, difference.baseline, difference.candidate, basis)
