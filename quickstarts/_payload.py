"""What every quickstart prints: a short summary of both verdicts, or (`--json`) both reports.

The summary comes first because the verdicts are what a person looks for:
two lines per case, its verdict with the message, then where it differs (or
what was checked). `--json` prints the contract's payload instead (CONTRACT
§10), for a program to read.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

from trainparity.version import add_report_metadata

# What each case of a quickstart is expected to answer.
EXPECTED = {"clean": "PASS", "intentional_fail": "FAIL"}


def quickstart_payload(clean: Any, intentional_fail: Any) -> dict[str, Any]:
    """`{"schema_version", "trainparity_version", "clean", "intentional_fail"}` (CONTRACT §10)."""
    return add_report_metadata(
        {"clean": clean.to_dict(), "intentional_fail": intentional_fail.to_dict()}
    )


def wants_json(prog: str, argv: Sequence[str] | None = None) -> bool:
    """Whether the command line asks for the reports as JSON (`--json`)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--json", action="store_true", help="print both reports as JSON")
    return parser.parse_args(argv).json


def print_payload(payload: dict[str, Any], *, as_json: bool = False) -> int:
    """Print the summary (or, `as_json`, the payload); 0 iff the clean case passed and the
    fault was caught."""
    if as_json:
        print(json.dumps(payload, indent=2, sort_keys=True))
    else:
        print(summary(payload))
    return 0 if _as_expected(payload) else 1


def summary(payload: Mapping[str, Any]) -> str:
    """Two lines per case, then whether both verdicts are as expected."""
    lines = []
    for key in EXPECTED:
        report = payload[key]
        lines.append(f"{key}: {report['outcome']}  {report['message']}")
        lines.append(f"  {_where(report)}")
    if _as_expected(payload):
        verdict = "as expected: the clean case passes and the intentional fault is caught (exit 0)"
    else:
        verdict = (
            "NOT as expected: the clean case must PASS and the intentional fault FAIL (exit 1)"
        )
    lines.append(f"{verdict}; --json prints both reports")
    return "\n".join(lines)


def _where(report: Mapping[str, Any]) -> str:
    """Where a report differs first, with both values; else what it checked."""
    difference = report.get("primary_difference")
    if isinstance(difference, Mapping):
        return (
            f"{difference['path']}: {difference['baseline']} in the baseline, "
            f"{difference['candidate']} in the candidate"
        )
    violation = report.get("first_violation")
    if isinstance(violation, Mapping):
        return (
            f"{violation['path']}: sample {violation['sample_id']} at rank {violation['rank']}, "
            f"epoch {violation['epoch']}, position {violation['position']}"
        )
    if "case" in report:
        return f"case {report['case']}"
    return f"policy {report.get('policy')}: {report.get('total_observations')} observations"


def _as_expected(payload: Mapping[str, Any]) -> bool:
    return all(payload[key]["outcome"] == outcome for key, outcome in EXPECTED.items())
