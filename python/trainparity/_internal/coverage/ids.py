"""Turns expected IDs and observed IDs into the int64 keys and segments the native core audits."""

from __future__ import annotations

import array
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from trainparity._internal.native.core import core

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

UNIVERSE_UNREADABLE = "expected ID universe could not be read: {type}"
UNIVERSE_UNSUPPORTED = "expected ID universe contains an unsupported ID; use int or str"
UNIVERSE_MIXED = "expected ID universe mixes int and str IDs; use only int or only str IDs"
UNIVERSE_DUPLICATES = "expected ID universe contains duplicate IDs"
UNIVERSE_TOO_LARGE = (
    "expected ID universe is too large: the coverage core audits at most {limit} IDs"
)
OBSERVED_ID_UNSUPPORTED = "observed sample ID is unsupported; use int or str"


@dataclass(frozen=True)
class RangeIds:
    """Expected int IDs forming an ascending progression inside int64 (never materialised)."""

    start: int
    step: int
    count: int

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.start + self.step * self.count, self.step))


@dataclass(frozen=True)
class KeyIds:
    """Expected int IDs inside int64, as ascending int64 bytes."""

    keys: bytes

    @property
    def count(self) -> int:
        return len(self.keys) // 8

    def __iter__(self) -> Iterator[int]:
        return iter(memoryview(self.keys).cast("q"))


@dataclass(frozen=True)
class ObjectIds:
    """Expected str IDs, or int IDs some of which lie beyond int64 (never both kinds)."""

    ids: dict[Any, int]  # every ID, in the order given

    @property
    def count(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[int | str]:
        return iter(self.ids)


ExpectedIds = RangeIds | KeyIds | ObjectIds


def id_order(sample_id: int | str) -> tuple[bool, int | str]:
    """Sort key of IDs: ints numerically, then strs by code point."""
    return (isinstance(sample_id, str), sample_id)


def read_expected_ids(source: Iterable[Any]) -> ExpectedIds | str:
    """The validated universe, or the message of the first problem (docs/compatibility.md, "Sample coverage")."""
    if isinstance(source, range):
        universe = _range_universe(source)
        if universe is not None:
            return universe
    keys = core.coverage_int64_from_buffer(source)
    if keys is not None:  # an integer array (numpy, array.array): no Python ints needed
        return _key_universe(keys)
    try:
        ids = source if isinstance(source, (list, tuple)) else list(source)
    except Exception as error:
        return UNIVERSE_UNREADABLE.format(type=type(error).__name__)
    keys, codes, first_unsupported, has_int, has_str = core.coverage_collect_ids(ids, None)
    if first_unsupported >= 0:
        return UNIVERSE_UNSUPPORTED
    if has_int and has_str:
        return UNIVERSE_MIXED
    if codes is None:
        return _key_universe(keys)
    if len(codes) != len(ids):
        return UNIVERSE_DUPLICATES
    return ObjectIds(codes)


def _range_universe(ids: range) -> RangeIds | str | None:
    """A range as start/step/count; None when it leaves int64 (then it is read element-wise)."""
    ascending = ids if ids.step > 0 else ids[::-1]
    try:
        count = len(ascending)
    except OverflowError:
        return UNIVERSE_TOO_LARGE.format(limit=core.COVERAGE_MAX_OBSERVATIONS)
    if count > core.COVERAGE_MAX_OBSERVATIONS:
        return UNIVERSE_TOO_LARGE.format(limit=core.COVERAGE_MAX_OBSERVATIONS)
    if count == 0:
        return RangeIds(0, 1, 0)
    if ascending[0] < INT64_MIN or ascending[-1] > INT64_MAX:
        return None
    return RangeIds(ascending.start, ascending.step, count)


def _key_universe(keys: bytes) -> KeyIds | str:
    sorted_keys, has_duplicates = core.coverage_sort_unique(keys)
    return UNIVERSE_DUPLICATES if has_duplicates else KeyIds(sorted_keys)


@dataclass(frozen=True)
class Observed:
    """Observations as core segments (keys, rank code, epoch, positions, workers).

    Keys are the int IDs themselves when `id_codes` is None; otherwise they are the
    codes `id_codes` gives each ID (in first-seen order; remapped before the audit).
    """

    segments: list[tuple[Any, ...]]
    rank_values: list[int]  # rank code -> rank
    id_codes: dict[Any, int] | None
    total: int


def observation_problem_message(field: str, beyond_int64: bool) -> str:
    """The contract's message for the first invalid observation's field."""
    if field == "type":
        return "observations must be SampleObservation values"
    if field == "sample_id":
        return OBSERVED_ID_UNSUPPORTED
    if field == "worker":
        message = "worker must be None or a non-negative integer"
    else:
        message = f"{field} must be a non-negative integer"
    return message + " below 2**63" if beyond_int64 else message


def read_observation_list(
    observations: Iterable[Any], observation_type: type, expected: ExpectedIds | None
) -> Observed | str:
    """Observed from SampleObservation values, or the message of the first problem."""
    try:
        items = list(observations)
    except Exception as error:
        return f"observations could not be read: {type(error).__name__}"
    id_codes = {} if isinstance(expected, ObjectIds) else None
    problem, columns = core.coverage_collect_observations(items, observation_type, id_codes)
    if problem is not None:
        _index, field, beyond_int64 = problem
        return observation_problem_message(field, beyond_int64)
    keys, ranks, rank_values, epochs, positions, workers, id_codes = columns
    segment = (keys, ranks, epochs, positions, workers)
    return Observed([segment], rank_values, id_codes, len(items))


def is_count(value: object) -> bool:
    """A non-negative int inside int64 (bool excluded)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX


def count_message(name: str, value: object) -> str:
    """Why `value` is not a valid non-negative count called `name`."""
    if isinstance(value, int) and not isinstance(value, bool) and value > INT64_MAX:
        return f"{name} must be a non-negative integer below 2**63"
    return f"{name} must be a non-negative integer"


def read_rank_id_lists(
    ids_by_rank: list[tuple[int, list[Any]]], epoch: object, expected: ExpectedIds | None
) -> Observed | str:
    """Observed from per-rank ID lists (ranks ascending, positions counted per rank)."""
    all_ids = [sample_id for _rank, ids in ids_by_rank for sample_id in ids]
    id_codes = {} if isinstance(expected, ObjectIds) else None
    keys, id_codes, first_unsupported, _has_int, _has_str = core.coverage_collect_ids(
        all_ids, id_codes
    )
    # The first observation's ID is checked before its epoch, like every observation's.
    if not is_count(epoch) and first_unsupported != 0:
        return count_message("epoch", epoch)
    if first_unsupported >= 0:
        return OBSERVED_ID_UNSUPPORTED
    key_view = memoryview(keys)
    segments = []
    offset = 0
    for code, (_rank, ids) in enumerate(ids_by_rank):
        end = offset + len(ids)
        segments.append((key_view[offset * 8 : end * 8], code, epoch, None, None))
        offset = end
    return Observed(segments, [rank for rank, _ids in ids_by_rank], id_codes, len(all_ids))


@dataclass(frozen=True)
class CoreInput:
    """Everything coverage_analyze takes, and the way back from keys to IDs."""

    segments: list[tuple[Any, ...]]
    rank_values: list[int]
    universe: tuple[int, int, int] | bytes | None
    expected_count: int | None
    total: int
    sample_ids: list[Any] | None  # key -> ID when keys are codes; None when keys are IDs

    def sample_id(self, key: int) -> int | str:
        return key if self.sample_ids is None else self.sample_ids[key]

    def expected_keys(self) -> Iterator[int]:
        """The expected IDs' keys, ascending (= ID order)."""
        if self.universe is None:
            return iter(())
        if isinstance(self.universe, tuple):
            start, step, count = self.universe
            return iter(range(start, start + step * count, step))
        return iter(memoryview(self.universe).cast("q"))


def core_input(observed: Observed, expected: ExpectedIds | None) -> CoreInput:
    """Puts observed and expected IDs into one key space that sorts like the IDs."""
    expected_count = None if expected is None else expected.count
    if observed.id_codes is None and not isinstance(expected, ObjectIds):
        universe: tuple[int, int, int] | bytes | None = None
        if isinstance(expected, RangeIds):
            universe = (expected.start, expected.step, expected.count)
        elif isinstance(expected, KeyIds):
            universe = expected.keys
        return CoreInput(
            observed.segments, observed.rank_values, universe, expected_count, observed.total, None
        )
    # Some ID is a str or beyond int64: every ID gets the code of its place in ID order.
    codes = observed.id_codes if observed.id_codes is not None else {}
    for sample_id in expected if expected is not None else ():
        codes.setdefault(sample_id, len(codes))
    ordered = sorted(codes, key=id_order)
    place = array.array("q", bytes(8 * len(ordered)))
    for new_code, sample_id in enumerate(ordered):
        place[codes[sample_id]] = new_code
    table = place.tobytes()
    segments = [
        (core.coverage_remap(keys, table), *columns) for keys, *columns in observed.segments
    ]
    universe_keys = None
    if expected is not None:
        universe_keys = array.array("q", sorted(place[codes[i]] for i in expected)).tobytes()
    return CoreInput(
        segments, observed.rank_values, universe_keys, expected_count, observed.total, ordered
    )


def example_limit(max_examples: int) -> int:
    """max_examples clamped to what the core's Py_ssize_t takes."""
    return min(max_examples, sys.maxsize)
