"""The coverage part of the native core, against a plain-Python model of its results."""

from __future__ import annotations

import array
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def int64(values):
    return array.array("q", values).tobytes()


def segment(keys, rank=0, epoch=0, positions=None, workers=None):
    """A core segment from Python lists (rank: code or list of codes)."""
    ranks = rank if isinstance(rank, int) else array.array("I", rank).tobytes()
    epochs = epoch if isinstance(epoch, int) else int64(epoch)
    return (
        int64(keys),
        ranks,
        epochs,
        None if positions is None else int64(positions),
        None if workers is None else int64(workers),
    )


# ---------------------------------------------------------------- the model


def model_analyze(segments, universe, max_examples):
    """What coverage_analyze must return, computed the obvious way."""
    rows = []  # (index, key, rank code, epoch, position, worker)
    for keys, rank, epoch, positions, workers in segments:
        count = len(keys) // 8
        keys = array.array("q", keys)
        ranks = [rank] * count if isinstance(rank, int) else list(array.array("I", rank))
        epochs = [epoch] * count if isinstance(epoch, int) else list(array.array("q", epoch))
        positions = list(range(count)) if positions is None else list(array.array("q", positions))
        workers = [-1] * count if workers is None else list(array.array("q", workers))
        for i in range(count):
            rows.append((len(rows), keys[i], ranks[i], epochs[i], positions[i], workers[i]))
    if universe is None:
        expected = None
    elif isinstance(universe, tuple):
        start, step, count = universe
        expected = set(range(start, start + step * count, step))
    else:
        expected = set(array.array("q", universe))
    traces = {}
    for row in rows:
        traces.setdefault(row[1], []).append(row)
    first_unexpected = next(
        (r for r in rows if expected is not None and r[1] not in expected), None
    )
    second = [trace[1] for trace in traces.values() if len(trace) > 1]
    first_repeat = min(second, default=None)
    same_rank_first = False
    if first_repeat is not None:
        same_rank_first = traces[first_repeat[1]][0][2] == first_repeat[2]
    crossing = [next((r for r in trace if r[2] != trace[0][2]), None) for trace in traces.values()]
    first_cross = min((r for r in crossing if r is not None), default=None)
    missing = sorted(expected - set(traces)) if expected is not None else []
    unexpected = [k for k in traces if expected is not None and k not in expected]

    def same_rank(trace):
        ranks = [r[2] for r in trace]
        return len(set(ranks)) < len(ranks)

    flags = {}
    for key in missing:
        flags[key] = 1
    for key, trace in traces.items():
        bits = 2 if key in unexpected else 0
        bits |= 4 if len(trace) > 1 else 0
        bits |= 8 if same_rank(trace) else 0
        bits |= 16 if len({r[2] for r in trace}) > 1 else 0
        if bits:
            flags[key] = bits
    anomalies = []
    for key in sorted(flags)[:max_examples]:
        trace = traces.get(key, [])
        anomalies.append(
            (
                key,
                flags[key],
                len(trace),
                tuple(sorted({r[2] for r in trace})),
                tuple(sorted({r[5] for r in trace if r[5] >= 0})),
                tuple(sorted({r[3] for r in trace})),
            )
        )
    in_universe = [k for k in traces if expected is None or k in expected]
    return {
        "unique": len(traces),
        "repeated": sum(len(t) > 1 for t in traces.values()),
        "same_rank": sum(same_rank(t) for t in traces.values()),
        "cross_rank": sum(len({r[2] for r in t}) > 1 for t in traces.values()),
        "missing": len(missing),
        "unexpected": len(unexpected),
        "padding": sum(len(traces[k]) - 1 for k in in_universe),
        "first_unexpected": first_unexpected,
        "first_repeat": first_repeat,
        "first_repeat_same_rank": same_rank_first,
        "first_cross": first_cross,
        "first_missing": missing[0] if missing else None,
        "anomalies": anomalies,
    }


def check(core, segments, universe=None, max_examples=10, rank_count=None):
    if rank_count is None:
        codes = [
            c
            for s in segments
            for c in ([s[1]] if isinstance(s[1], int) else array.array("I", s[1]))
        ]
        rank_count = max(codes, default=0) + 1
    got = core.coverage_analyze(segments, rank_count, universe, max_examples, False)
    assert got == model_analyze(segments, universe, max_examples)
    return got


# ---------------------------------------------------------------- examples


def test_clean_range_universe(core):
    result = check(core, [segment([3, 1]), segment([0, 2], rank=1)], (0, 1, 4))
    assert result["unique"] == 4 and result["anomalies"] == []


def test_repeats_same_rank_then_cross_rank(core):
    segments = [segment([0, 1, 0], rank=0), segment([1, 2], rank=1)]
    result = check(core, segments, (0, 1, 4))
    assert result["first_repeat"] == (2, 0, 0, 0, 2, -1) and result["first_repeat_same_rank"]
    assert result["first_cross"] == (3, 1, 1, 0, 0, -1)
    assert result["first_missing"] == 3


def test_unexpected_ids_are_tracked_like_the_others(core):
    segments = [segment([7, 0, 7], rank=[0, 0, 1], epoch=[0, 1, 2], workers=[-1, 3, 2])]
    result = check(core, segments, (0, 1, 2))
    assert result["first_unexpected"][0] == 0
    assert result["anomalies"][-1] == (7, 2 | 4 | 16, 2, (0, 1), (2,), (0, 2))


def test_strided_and_sparse_universes(core):
    check(core, [segment([10, 30, 25, 50])], (10, 20, 3))  # 25 is between two slots
    sparse = int64(sorted({5, 1 << 40, -(1 << 50), 17}))
    check(core, [segment([17, 17, 1 << 40, 6])], sparse)


def test_progression_given_as_keys_equals_range(core):
    segments = [segment([4, 2, 2, 9])]
    by_keys = core.coverage_analyze(segments, 1, int64([0, 2, 4, 6]), 10, False)
    by_range = core.coverage_analyze(segments, 1, (0, 2, 4), 10, False)
    assert by_keys == by_range


def test_no_universe_dense_and_sparse_keys(core):
    check(core, [segment([5, 6, 5], rank=[0, 1, 1])], None)
    rng = random.Random(3)
    keys = [rng.randrange(INT64_MIN, INT64_MAX) for _ in range(3000)]
    keys += keys[:50]  # sparse keys force the growing hash table through several resizes
    check(core, [segment(keys[:1500], rank=0), segment(keys[1500:], rank=1)], None)


def test_int64_extremes(core):
    keys = [INT64_MAX, INT64_MIN, 0, INT64_MIN]
    check(core, [segment(keys)], int64([INT64_MIN, -1, INT64_MAX]))
    check(core, [segment(keys)], (INT64_MAX - 2, 1, 3))
    check(core, [segment(keys)], None)


def test_more_than_254_ranks_use_wide_state(core):
    ranks = list(range(300)) + [299, 5]
    keys = list(range(300)) + [299, 299]
    result = check(core, [segment(keys, rank=ranks)], (0, 1, 300), rank_count=300)
    assert result["first_repeat"][2] == 299 and result["first_repeat_same_rank"]


def test_anomaly_limit_and_order_merge_missing_and_observed(core):
    segments = [segment([1, 1, 8, 3, 3])]
    result = check(core, segments, (0, 1, 6), max_examples=4)
    assert [row[0] for row in result["anomalies"]] == [0, 1, 2, 3]
    assert check(core, segments, (0, 1, 6), max_examples=0)["anomalies"] == []


def test_empty_input(core):
    assert check(core, [], (0, 1, 0))["unique"] == 0
    assert check(core, [segment([])], None, rank_count=1)["first_repeat"] is None
    assert check(core, [], (0, 1, 3))["first_missing"] == 0


def test_details_list_every_missing_key_and_group(core):
    segments = [segment([2, 2, 9], rank=[0, 1, 1])]
    result = core.coverage_analyze(segments, 2, (0, 1, 4), 0, True)
    assert list(array.array("q", result["missing_keys"])) == [0, 1, 3]
    assert result["groups"] == [(2, 4 | 16, 2, (0, 1), ()), (9, 2, 1, (1,), ())]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(-3, 12), st.integers(0, 3), st.integers(0, 2), st.integers(-1, 2)
            ),
            max_size=12,
        ),
        max_size=4,
    ),
    st.one_of(
        st.none(),
        st.tuples(st.integers(-3, 3), st.integers(1, 3), st.integers(0, 6)),
        st.sets(st.integers(-4, 14), max_size=8).map(lambda s: int64(sorted(s))),
    ),
    st.integers(0, 6),
    st.booleans(),
)
def test_core_matches_the_model(core, ranks, universe, max_examples, per_row_ranks):
    segments = []
    for code, rows in enumerate(ranks):
        keys = [row[0] for row in rows]
        rank = [row[1] for row in rows] if per_row_ranks else code
        segments.append(
            segment(
                keys,
                rank=rank,
                epoch=[row[2] for row in rows],
                positions=list(range(len(rows))),
                workers=[row[3] for row in rows],
            )
        )
    check(core, segments, universe, max_examples, rank_count=4)


# ---------------------------------------------------------------- evidence order


def test_trace_order_is_by_key_then_input_order(core):
    segments = [segment([5, -1, 5], rank=0), segment([-1, 3], rank=1)]
    order = list(array.array("I", core.coverage_trace_order(segments, 2)))
    assert order == [1, 3, 4, 0, 2]


def render_all(core, segments, budget, id_texts):
    order = core.coverage_trace_order(segments, 2)
    total = len(order) // 4
    pieces, start = [], 0
    while start < total:
        text, start = core.coverage_render_traces(
            segments, 2, order, start, budget, int64([10, 20]), id_texts
        )
        pieces.append(text)
    return pieces


def occurrence(sample_id, rank, epoch, position, worker):
    return {
        "epoch": epoch,
        "position": position,
        "rank": rank,
        "sample_id": sample_id,
        "worker": worker,
    }


@pytest.mark.parametrize("budget, calls", [(1, 3), (2, 2), (100, 1)])
def test_rendered_traces_are_indent_2_json_cut_at_id_boundaries(core, budget, calls):
    segments = [
        segment([5, -1, 5], rank=0, epoch=[0, 1, 2], workers=[-1, 3, 0]),
        segment([-1, 3], rank=1, epoch=7),
    ]
    pieces = render_all(core, segments, budget, None)
    assert len(pieces) == calls
    traces = [
        {
            "occurrences": [occurrence(-1, 10, 1, 1, 3), occurrence(-1, 20, 7, 0, None)],
            "sample_id": -1,
        },
        {"occurrences": [occurrence(3, 20, 7, 1, None)], "sample_id": 3},
        {
            "occurrences": [occurrence(5, 10, 0, 0, None), occurrence(5, 10, 2, 2, 0)],
            "sample_id": 5,
        },
    ]
    document = json.dumps({"traces": traces}, indent=2, sort_keys=True)
    assert document == '{\n  "traces": [\n' + "".join(pieces) + "\n  ]\n}"


def test_rendered_traces_use_the_id_texts_of_codes(core):
    segments = [segment([1, 0], rank=0)]
    (text,) = render_all(core, segments, 10, ['"a\\u00e9"', '"b"'])
    assert '"sample_id": "a\\u00e9"' in text and text.index('"a') < text.index('"b"')
    with pytest.raises(ValueError):
        render_all(core, segments, 10, ['"a"'])
    with pytest.raises(ValueError):
        core.coverage_render_traces(segments, 2, b"", 0, 1, int64([0, 0]), None)


# ---------------------------------------------------------------- input shaping


def test_collect_ids_int_mode(core):
    keys, codes, bad, has_int, has_str = core.coverage_collect_ids([3, -2, 3], None)
    assert list(array.array("q", keys)) == [3, -2, 3] and codes is None
    assert (bad, has_int, has_str) == (-1, True, False)


def test_collect_ids_switches_to_codes_for_str_and_big_ints(core):
    keys, codes, bad, has_int, has_str = core.coverage_collect_ids([7, 7, "a", 2**70, 7], None)
    assert codes == {7: 0, "a": 1, 2**70: 2}
    assert list(array.array("q", keys)) == [0, 0, 1, 2, 0]
    assert (bad, has_int, has_str) == (-1, True, True)
    keys, codes, *_ = core.coverage_collect_ids(("b",), {"a": 0})
    assert codes == {"a": 0, "b": 1} and list(array.array("q", keys)) == [1]


@pytest.mark.parametrize("bad", [True, 1.0, None, b"x", float("nan")])
def test_collect_ids_stops_at_the_first_unsupported_id(core, bad):
    assert core.coverage_collect_ids([1, bad, "x"], None)[2] == 1


class Observation:
    def __init__(self, sample_id, rank, epoch, position, worker=None):
        self.sample_id, self.rank, self.epoch = sample_id, rank, epoch
        self.position, self.worker = position, worker


def test_collect_observations_columns(core):
    items = [Observation(4, 9, 1, 0, None), Observation(5, 2, 0, 1, 3), Observation(4, 9, 0, 2, 0)]
    problem, columns = core.coverage_collect_observations(items, Observation, None)
    assert problem is None
    keys, ranks, rank_values, epochs, positions, workers, codes = columns
    assert list(array.array("q", keys)) == [4, 5, 4]
    assert list(array.array("I", ranks)) == [0, 1, 0] and rank_values == [9, 2]
    assert list(array.array("q", epochs)) == [1, 0, 0]
    assert list(array.array("q", positions)) == [0, 1, 2]
    assert list(array.array("q", workers)) == [-1, 3, 0] and codes is None


@pytest.mark.parametrize(
    "item, field, beyond",
    [
        (object(), "type", False),
        (Observation(True, 0, 0, 0), "sample_id", False),
        (Observation(0, -1, 0, 0), "rank", False),
        (Observation(0, 1.5, 0, 0), "rank", False),
        (Observation(0, 2**63, 0, 0), "rank", True),
        (Observation(0, 0, "0", 0), "epoch", False),
        (Observation(0, 0, 0, None), "position", False),
        (Observation(0, 0, 0, 0, -1), "worker", False),
        (Observation(0, 0, 0, 0, False), "worker", False),
    ],
)
def test_collect_observations_reports_the_first_invalid_field(core, item, field, beyond):
    items = [Observation(0, 0, 0, 0), item, Observation(True, -1, -1, -1)]
    problem, columns = core.coverage_collect_observations(items, Observation, None)
    assert problem == (1, field, beyond) and columns is None


def test_int64_from_buffer(core):
    for code in "bBhHiIlLqQ":
        values = [0, 1, 100] if code.isupper() else [-5, 0, 100]
        assert (
            list(array.array("q", core.coverage_int64_from_buffer(array.array(code, values))))
            == values
        )
    assert core.coverage_int64_from_buffer(array.array("Q", [2**64 - 1])) is None
    assert core.coverage_int64_from_buffer(array.array("d", [1.0])) is None
    assert core.coverage_int64_from_buffer([1, 2]) is None
    square = memoryview(array.array("q", [1, 2, 3, 4])).cast("B").cast("q", (2, 2))
    assert core.coverage_int64_from_buffer(square) is None


def test_sort_unique_remap_first_below(core):
    ordered, duplicates = core.coverage_sort_unique(int64([5, INT64_MIN, -1, INT64_MAX]))
    assert list(array.array("q", ordered)) == [INT64_MIN, -1, 5, INT64_MAX] and not duplicates
    assert core.coverage_sort_unique(int64([3, 1, 3]))[1]
    assert list(array.array("q", core.coverage_remap(int64([2, 0]), int64([7, 8, 9])))) == [9, 7]
    with pytest.raises(ValueError):
        core.coverage_remap(int64([3]), int64([7]))
    assert core.coverage_first_below(int64([0, 4, -2, -7]), -1) == 2
    assert core.coverage_first_below(int64([0, 4]), 0) == -1


@pytest.mark.parametrize(
    "segments, rank_count, universe, error",
    [
        ("nope", 1, None, TypeError),
        ([(b"",)], 1, None, TypeError),
        ([(b"1234567", 0, 0, None, None)], 1, None, ValueError),
        ([(int64([1]), 1, 0, None, None)], 1, None, ValueError),
        ([(int64([1]), array.array("I", [4]).tobytes(), 0, None, None)], 2, None, ValueError),
        ([(int64([1, 2]), 0, int64([0]), None, None)], 1, None, ValueError),
        ([(int64([1]), 0, -1, None, None)], 1, None, ValueError),
        ([], 0, None, ValueError),
        ([], 1, int64([2, 1]), ValueError),
        ([], 1, (INT64_MAX, 1, 2), ValueError),
        ([], 1, (0, 0, 2), ValueError),
    ],
)
def test_bad_core_arguments_raise(core, segments, rank_count, universe, error):
    with pytest.raises(error):
        core.coverage_analyze(segments, rank_count, universe, 10, False)


def test_observation_limit_is_exported(core):
    assert core.COVERAGE_MAX_OBSERVATIONS == 2**32 - 2
