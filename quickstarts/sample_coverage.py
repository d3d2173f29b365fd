"""Quickstart: a clean sample-coverage audit (PASS) and a replayed sample (FAIL)."""

from __future__ import annotations

import json
from typing import Any

from trainparity.sample_coverage import ExactlyOnce, SampleObservation, audit_sample_coverage
from trainparity.version import add_report_metadata


def clean_observations() -> list[SampleObservation]:
    """Rank 0 consumes samples 0..3 once each, in order."""
    return [SampleObservation(sample_id, 0, 0, sample_id) for sample_id in range(4)]


def faulty_observations() -> list[SampleObservation]:
    """A resume cursor that replays sample 2 at position 3 instead of moving on to sample 3."""
    return clean_observations()[:3] + [SampleObservation(2, 0, 0, 3)]


def run() -> dict[str, Any]:
    """Both audits against ExactlyOnce(range(4)), as one report payload."""
    policy = ExactlyOnce(range(4))
    clean = audit_sample_coverage(clean_observations(), policy)
    intentional_fail = audit_sample_coverage(faulty_observations(), policy)
    return add_report_metadata(
        {"clean": clean.to_dict(), "intentional_fail": intentional_fail.to_dict()}
    )


def main() -> int:
    """Prints the payload; 0 iff the clean audit passed and the faulty one failed."""
    payload = run()
    print(json.dumps(payload, indent=2, sort_keys=True))
    passed = payload["clean"]["outcome"] == "PASS"
    failed = payload["intentional_fail"]["outcome"] == "FAIL"
    return 0 if passed and failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
