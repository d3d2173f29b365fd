"""The machine reports of the quickstarts, pinned byte for byte (timing and machine aside).

A restructuring must not change a report: each quickstart's payload, with the
fields that depend on the machine or the clock removed, must equal the pinned
JSON in tests/golden/ to the byte. Regenerate a pin only for an intended
report change: `TRAINPARITY_REPIN=1 pytest tests/test_report_pins.py`.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from trainparity._internal.reports.machine import report_text

GOLDEN = Path(__file__).parent / "golden"

# Keys whose values come from this machine or this moment, never from the check's logic.
# peak_temporary_directory_bytes counts the children's result files, which hold their PIDs:
# a PID one digit longer makes it a byte larger. snapshot_ipc_bytes counts the observer's
# snapshot files, which carry its machine's environment fingerprint (the CPU's SIMD flags
# among it): 48 bytes more on an AVX-512 machine than where the pins were made.
VOLATILE_KEYS = frozenset(
    {
        "environment",
        "timing_seconds",
        "process_ids",
        "peak_temporary_directory_bytes",
        "snapshot_ipc_bytes",
    }
)
# Per-process evidence: which phase ran and how it ended is pinned; PIDs and resources are not.
VOLATILE_PROCESS_KEYS = frozenset(
    {"pid", "elapsed_seconds", "user_seconds", "system_seconds", "peak_rss_bytes", "ranks"}
)


def pinned_form(value: Any) -> Any:
    """`value` without the volatile keys, recursively."""
    if isinstance(value, dict):
        return {
            key: [pinned_process(row) for row in item] if key == "processes" else pinned_form(item)
            for key, item in value.items()
            if key not in VOLATILE_KEYS
        }
    if isinstance(value, (list, tuple)):
        return [pinned_form(item) for item in value]
    return value


def pinned_process(row: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in row.items() if key not in VOLATILE_PROCESS_KEYS}


@pytest.mark.parametrize("quickstart", ["resume", "accumulation", "sample_coverage"])
def test_quickstart_report_is_byte_identical_to_its_pin(quickstart, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # the quickstarts write nothing of theirs into the checkout
    module = importlib.import_module(f"trainparity.quickstarts.{quickstart}")
    # Through JSON first, as the quickstart prints it: tuples and lists look alike there.
    payload = json.loads(json.dumps(module.run()))
    text = report_text(pinned_form(payload))
    pin = GOLDEN / f"quickstart_{quickstart}.json"
    if os.environ.get("TRAINPARITY_REPIN") == "1":
        pin.write_text(text, encoding="utf-8")
    assert text == pin.read_text(encoding="utf-8")
