"""Property tests: the native audit agrees with a plain-Python reference of CONTRACT §8."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainparity._internal.coverage.audit import (
    AtLeastOnce,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    SampleObservation,
    audit_sample_coverage,
)
from trainparity._internal.environment import environment_fingerprint
from trainparity.version import add_report_metadata


def id_key(sample_id):
    return (isinstance(sample_id, str), sample_id)


def reference(observations, policy, max_examples):
    """(result dict, evidence dict) computed directly from the contract's definitions."""
    expected = None
    if not isinstance(policy, NoCrossRankOverlap):
        expected = list(policy.expected_ids)
    expected_set = None if expected is None else set(expected)
    traces = {}
    for observation in observations:
        traces.setdefault(observation.sample_id, []).append(observation)
    observed = sorted(traces, key=id_key)

    def ranks(sample_id):
        return sorted({o.rank for o in traces[sample_id]})

    def same_rank_ranks(sample_id):
        return [r for r in ranks(sample_id) if sum(o.rank == r for o in traces[sample_id]) > 1]

    missing = [] if expected is None else sorted(expected_set - set(traces), key=id_key)
    unexpected = [i for i in observed if expected_set is not None and i not in expected_set]
    repeated = [i for i in observed if len(traces[i]) > 1]
    same_rank = [i for i in observed if same_rank_ranks(i)]
    cross_rank = [i for i in observed if len(ranks(i)) > 1]
    padding = sum(len(traces[i]) - 1 for i in observed if expected_set is None or i in expected_set)

    first_rank, seen_pairs, duplicate, crossing = {}, set(), None, None
    for index, o in enumerate(observations):
        if o.sample_id in first_rank:
            if duplicate is None:
                same = (o.sample_id, o.rank) in seen_pairs
                duplicate = (index, "same_rank_duplicate" if same else "cross_rank_overlap", o)
            if crossing is None and o.rank != first_rank[o.sample_id]:
                crossing = (index, "cross_rank_overlap", o)
        else:
            first_rank[o.sample_id] = o.rank
        seen_pairs.add((o.sample_id, o.rank))
    first_unexpected = next(
        (
            (index, "unexpected_id", o)
            for index, o in enumerate(observations)
            if expected_set is not None and o.sample_id not in expected_set
        ),
        None,
    )
    paths = {
        "unexpected_id": "coverage.unexpected_ids",
        "same_rank_duplicate": "coverage.same_rank_duplicate",
        "cross_rank_overlap": "coverage.cross_rank_overlap",
    }

    def observed_violation(found):
        _index, kind, o = found
        return {
            "kind": kind,
            "path": paths[kind],
            "sample_id": o.sample_id,
            "rank": o.rank,
            "worker": o.worker,
            "epoch": o.epoch,
            "position": o.position,
        }

    def empty_violation(kind, path, sample_id=None):
        return {
            "kind": kind,
            "path": path,
            "sample_id": sample_id,
            "rank": None,
            "worker": None,
            "epoch": None,
            "position": None,
        }

    violation = None
    if policy.name == "no_cross_rank_overlap":
        violation = crossing and observed_violation(crossing)
    else:
        candidates = [first_unexpected]
        if policy.name == "exactly_once":
            candidates.append(duplicate)
        candidates = [c for c in candidates if c is not None]
        if candidates:
            violation = observed_violation(min(candidates, key=lambda c: c[0]))
        elif missing:
            violation = empty_violation("missing_id", "coverage.missing_ids", missing[0])
        elif policy.name == "expected_padding" and padding != policy.padding_count:
            violation = empty_violation("padding_count", "coverage.actual_padding_count")

    anomalies = []
    for sample_id in sorted(set(missing) | set(unexpected) | set(repeated), key=id_key):
        trace = traces.get(sample_id, [])
        labels = {
            "missing_id": sample_id in missing,
            "unexpected_id": sample_id in unexpected,
            "repeated_id": sample_id in repeated,
            "same_rank_duplicate": sample_id in same_rank,
            "cross_rank_overlap": sample_id in cross_rank,
        }
        anomalies.append(
            {
                "kind": "+".join(sorted(label for label, present in labels.items() if present)),
                "sample_id": sample_id,
                "occurrence_count": len(trace),
                "ranks": tuple(sorted({o.rank for o in trace})),
                "workers": tuple(sorted({o.worker for o in trace if o.worker is not None})),
                "epochs": tuple(sorted({o.epoch for o in trace})),
            }
        )
    padded = policy.name == "expected_padding"
    messages = {
        "exactly_once": "every expected sample ID was observed exactly once",
        "at_least_once": "every expected sample ID was observed at least once",
        "no_cross_rank_overlap": "no sample ID was observed on more than one rank",
        "expected_padding": "observed repetitions match the declared padding policy",
    }
    outcome = "PASS" if violation is None else "FAIL"
    result = add_report_metadata(
        {
            "outcome": outcome,
            "policy": policy.name,
            "message": messages[policy.name]
            if violation is None
            else f"{policy.name} policy was violated",
            "total_observations": len(observations),
            "unique_observed_ids": len(traces),
            "expected_id_count": None if expected is None else len(expected),
            "missing_id_count": len(missing),
            "unexpected_id_count": len(unexpected),
            "repeated_id_count": len(repeated),
            "same_rank_duplicate_id_count": len(same_rank),
            "cross_rank_overlap_id_count": len(cross_rank),
            "actual_padding_count": padding if padded else None,
            "expected_padding_count": policy.padding_count if padded else None,
            "first_violation": violation,
            "anomaly_examples": tuple(anomalies[:max_examples]),
            "evidence_path": None,
            "environment": environment_fingerprint(),
        }
    )
    evidence = add_report_metadata(
        {
            "environment": environment_fingerprint(),
            "outcome": outcome,
            "policy": policy.name,
            "first_violation": violation,
            "expected_ids": None if expected is None else sorted(expected, key=id_key),
            "missing_ids": missing,
            "unexpected_ids": unexpected,
            "repeated_ids": [
                {"sample_id": i, "ranks": ranks(i), "occurrence_count": len(traces[i])}
                for i in repeated
            ],
            "same_rank_duplicates": [
                {"sample_id": i, "rank": r} for i in same_rank for r in same_rank_ranks(i)
            ],
            "cross_rank_overlaps": [{"sample_id": i, "ranks": ranks(i)} for i in cross_rank],
            "actual_padding_count": padding,
            "traces": [
                {
                    "sample_id": i,
                    "occurrences": [
                        {
                            "sample_id": o.sample_id,
                            "rank": o.rank,
                            "epoch": o.epoch,
                            "position": o.position,
                            "worker": o.worker,
                        }
                        for o in traces[i]
                    ],
                }
                for i in observed
            ],
        }
    )
    return result, evidence


INT_IDS = st.one_of(
    st.integers(-4, 12), st.sampled_from([2**64 + 1, -(2**66), 2**63 - 1, -(2**63)])
)
STR_IDS = st.text(alphabet='ab\u00e9\U0001f600"', max_size=2)
OBSERVATIONS = st.lists(
    st.builds(
        SampleObservation,
        st.one_of(INT_IDS, INT_IDS, STR_IDS),
        st.integers(0, 3),
        st.integers(0, 2),
        st.integers(0, 5),
        st.one_of(st.none(), st.integers(0, 2)),
    ),
    max_size=16,
)
UNIVERSES = st.one_of(
    st.sets(INT_IDS, max_size=10).map(list),
    st.sets(STR_IDS, max_size=6).map(list),
    st.builds(range, st.integers(-3, 3), st.integers(-3, 12), st.sampled_from([1, 2, 3, -1])),
)
POLICIES = st.one_of(
    st.builds(ExactlyOnce, UNIVERSES),
    st.builds(AtLeastOnce, UNIVERSES),
    st.just(NoCrossRankOverlap()),
    st.builds(ExpectedPadding, UNIVERSES, st.integers(0, 4)),
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(OBSERVATIONS, POLICIES, st.integers(0, 6))
def test_audit_agrees_with_the_reference(tmp_path: Path, observations, policy, max_examples):
    path = tmp_path / "evidence.json"
    result = audit_sample_coverage(
        observations, policy, max_examples=max_examples, evidence_path=path
    )
    expected_result, expected_evidence = reference(observations, policy, max_examples)
    expected_result["evidence_path"] = str(path)
    assert result.to_dict() == expected_result
    assert path.read_text() == json.dumps(expected_evidence, indent=2, sort_keys=True) + "\n"


@settings(max_examples=100, deadline=None)
@given(OBSERVATIONS, POLICIES)
def test_same_input_same_report(observations, policy):
    first = audit_sample_coverage(observations, policy).to_dict()
    assert first == audit_sample_coverage(tuple(observations), policy).to_dict()
