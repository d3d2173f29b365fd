"""Where two recordings part, and what a rerun's parting says of the lead it tested."""

from __future__ import annotations

import math
from pathlib import Path

from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.recording.reader import read_recordings
from trainparity._internal.recording.trajectory import compare_records

__all__ = ["parting", "status_of"]


def parting(first: Path, second: Path) -> tuple[int, float] | None:
    """(first step whose records differ, largest relative distance there) of two recordings; None when equal.

    Records are paired by the step they claim, over the steps both recorded:
    a resumed side starts at its split step.
    """
    left, right = read_recordings(first), read_recordings(second)
    exact = ExactComparison()
    found: list[tuple[int, float]] = []
    for rank in sorted(set(left) | set(right)):
        if rank not in left or rank not in right:
            return (0, math.inf)
        theirs = {record.step: record for record in right[rank].steps}
        for record in left[rank].steps:
            other = theirs.get(record.step)
            if other is None:
                continue
            compared = compare_records(exact, record, other)
            if compared.differences:
                distance = max(compared.relative_rms_errors.values(), default=math.inf)
                found.append((record.step, distance))
                break
    return min(found) if found else None


def status_of(
    found: tuple[int, float] | None, original: tuple[int, float] | None
) -> tuple[str, str]:
    if found is None:
        return "confirmed", "equal bit for bit at every compared step"
    step, distance = found
    evidence = f"still part at step {step} (relative distance {distance:.3g})"
    if original is not None:
        if step > original[0] or (original[1] > 0 and distance * 10 < original[1]):
            return "partial", evidence + f"; originally at step {original[0]} ({original[1]:.3g})"
    return "ruled out", evidence
