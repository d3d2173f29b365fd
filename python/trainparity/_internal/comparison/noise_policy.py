"""NoiseComparison: the candidate may differ from uninterrupted training by `factor` × its run-to-run noise.

The declared relation, per recorded step and per floating-point path: the
**noise** is the largest distance between two uninterrupted runs, the
**excursion** the candidate's distance to the nearest of them, and the
candidate stays inside when excursion ≤ factor × noise + floor. Everything
else (integers, strings, structure, RNG states) stays exact, and so does a
floating-point path whose noise is exactly 0. noise/envelope.py judges one
step; docs/design.md says why the distance is ‖a−b‖₂.

This module imports nothing of trainparity's: comparison/states.py looks the
class up to accept it, so it must not lean on comparison/ in turn.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["NoiseComparison"]


class NoiseComparison:
    """Judge the candidate against the spread of `baselines` uninterrupted runs.

    `factor`: how many times the measured noise the candidate may move.
    `baselines`: uninterrupted runs to measure the noise from (at least 2).
    `floor_rtol`, `floor_atol`: an allowance added to factor × noise, relative
    to the baselines' norm and absolute (both on the L2 norm of a tensor).
    `max_noise`: the largest noise (relative L2 distance) at which a verdict is
    still given; above it the check abstains, since faults smaller than the
    noise cannot be seen. None: no limit.
    """

    name = "noise_envelope"

    def __init__(
        self,
        factor: float = 8.0,
        baselines: int = 3,
        floor_rtol: float = 0.0,
        floor_atol: float = 0.0,
        max_noise: float | None = None,
    ) -> None:
        if not _is_number(factor) or not math.isfinite(factor) or factor <= 0:
            raise ValueError(f"factor must be a finite number > 0, got {factor!r}")
        if isinstance(baselines, bool) or not isinstance(baselines, int) or baselines < 2:
            raise ValueError(
                f"baselines must be an int >= 2 (the noise is the spread of several "
                f"uninterrupted runs), got {baselines!r}"
            )
        if baselines > 26:
            raise ValueError(f"baselines must be at most 26, got {baselines!r}")
        for label, value in (("floor_rtol", floor_rtol), ("floor_atol", floor_atol)):
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{label} must be a finite number >= 0, got {value!r}")
        if max_noise is not None and (
            not _is_number(max_noise) or not math.isfinite(max_noise) or max_noise <= 0
        ):
            raise ValueError(f"max_noise must be a finite number > 0 or None, got {max_noise!r}")
        self.factor = float(factor)
        self.baselines = baselines
        self.floor_rtol = float(floor_rtol)
        self.floor_atol = float(floor_atol)
        self.max_noise = None if max_noise is None else float(max_noise)

    @property
    def has_floor(self) -> bool:
        return self.floor_rtol > 0 or self.floor_atol > 0

    def settings(self) -> dict[str, Any]:
        """The declared relation, as the report gives it."""
        return {
            "factor": self.factor,
            "baselines": self.baselines,
            "floor_rtol": self.floor_rtol,
            "floor_atol": self.floor_atol,
            "max_noise": self.max_noise,
        }

    def _key(self) -> tuple:
        return (self.factor, self.baselines, self.floor_rtol, self.floor_atol, self.max_noise)

    def __repr__(self) -> str:
        return (
            f"NoiseComparison(factor={self.factor!r}, baselines={self.baselines!r}, "
            f"floor_rtol={self.floor_rtol!r}, floor_atol={self.floor_atol!r}, "
            f"max_noise={self.max_noise!r})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NoiseComparison) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash((NoiseComparison, *self._key()))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
