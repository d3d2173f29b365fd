"""The four verdicts every check returns."""

from __future__ import annotations

import enum

try:
    _StrEnum = enum.StrEnum  # type: ignore[attr-defined]
except AttributeError:  # Python 3.10: same behaviour built from str + Enum.

    class _StrEnum(str, enum.Enum):  # type: ignore[no-redef]
        def __str__(self) -> str:
            return str(self.value)


class Outcome(_StrEnum):
    """PASS, FAIL, ABSTAIN (evidence cannot justify a verdict) or ERROR (could not run)."""

    PASS = "PASS"
    FAIL = "FAIL"
    ABSTAIN = "ABSTAIN"
    ERROR = "ERROR"
