"""The snapshot record: a frozen state tree with its step, backend and schema version."""

from __future__ import annotations

from dataclasses import dataclass

from trainparity._internal.state.freeze import FrozenMapping

SNAPSHOT_SCHEMA_VERSION = 1
REFERENCE_BACKEND = "full_value_reference"


@dataclass(frozen=True)
class Snapshot:
    """What one run observed: `state` is a frozen mapping (docs/compatibility.md, "Snapshots")."""

    step: int | None
    state: FrozenMapping
    backend: str = REFERENCE_BACKEND
    schema_version: int = SNAPSHOT_SCHEMA_VERSION
