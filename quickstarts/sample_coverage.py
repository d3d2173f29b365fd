"""Quickstart: a clean sample-coverage audit (PASS) and a replayed sample (FAIL)."""

from __future__ import annotations

from typing import Any

from trainparity import ExactlyOnce, SampleObservation, audit_sample_coverage
from trainparity.quickstarts._payload import print_payload, quickstart_payload, wants_json


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
    return quickstart_payload(clean, intentional_fail)


def main(argv: list[str] | None = None) -> int:
    """Prints both verdicts (`--json`: the payload); 0 iff the clean audit passed and the
    faulty one failed."""
    as_json = wants_json("python -m trainparity.quickstarts.sample_coverage", argv)
    return print_payload(run(), as_json=as_json)


if __name__ == "__main__":
    raise SystemExit(main())
