"""The snapshot record: a frozen state tree with its step, backend and schema version."""

from __future__ import annotations

from dataclasses import dataclass

from trainparity.state import FrozenMapping

SNAPSHOT_SCHEMA_VERSION = 1
REFERENCE_BACKEND = "full_value_reference"


@dataclass(frozen=True)
class Snapshot:
    """What one run observed: `state` is a frozen mapping (CONTRACT §4.1)."""

    step: int | None
    state: FrozenMapping
    backend: str = REFERENCE_BACKEND
    schema_version: int = SNAPSHOT_SCHEMA_VERSION


_CAPTURE_NAMES = ("CaptureIssue", "CaptureResult", "capture_snapshot")


def __getattr__(name: str) -> object:
    """The contract names live capture here; it is defined in trainparity.capture (which needs Snapshot)."""
    if name in _CAPTURE_NAMES:
        from trainparity import capture

        return getattr(capture, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
