"""What every quickstart prints: both reports in one payload, and the exit code it implies."""

from __future__ import annotations

import json
from typing import Any

from trainparity.version import add_report_metadata


def quickstart_payload(clean: Any, intentional_fail: Any) -> dict[str, Any]:
    """`{"schema_version", "trainparity_version", "clean", "intentional_fail"}` (CONTRACT §10)."""
    return add_report_metadata(
        {"clean": clean.to_dict(), "intentional_fail": intentional_fail.to_dict()}
    )


def print_payload(payload: dict[str, Any]) -> int:
    """Print the payload as JSON; 0 iff the clean case passed and the fault was caught."""
    print(json.dumps(payload, indent=2, sort_keys=True))
    passed = payload["clean"]["outcome"] == "PASS"
    caught = payload["intentional_fail"]["outcome"] == "FAIL"
    return 0 if passed and caught else 1
