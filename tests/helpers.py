"""Small builders shared by the tests."""

from __future__ import annotations

from trainparity.snapshot import Snapshot
from trainparity.state import freeze


def snapshot_of(state: dict, *, step: int | None = 0, **fields) -> Snapshot:
    """A snapshot of `state` frozen with the reference freezer (ANCHOR_CASES §4 helper)."""
    return Snapshot(step=step, state=freeze(state), **fields)


def extra_pair(left, right) -> tuple[Snapshot, Snapshot]:
    """Snapshots of `{"extra": left}` and `{"extra": right}`."""
    return snapshot_of({"extra": left}), snapshot_of({"extra": right})
