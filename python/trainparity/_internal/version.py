"""Package and machine-report schema versions, and the metadata every report starts with."""

from __future__ import annotations

from typing import Any

PACKAGE_VERSION = "0.2.0.dev0"
MACHINE_REPORT_SCHEMA_VERSION = 2


def add_report_metadata(payload: dict[str, Any]) -> dict[str, Any]:
    """Return a new dict with `schema_version` and `trainparity_version` first, then `payload`."""
    return {
        "schema_version": MACHINE_REPORT_SCHEMA_VERSION,
        "trainparity_version": PACKAGE_VERSION,
        **payload,
    }
