"""Writes the complete coverage evidence file, streamed and atomically (temp file + rename)."""

# The file is byte-for-byte json.dumps(evidence, indent=2, sort_keys=True) + "\n"
# (docs/compatibility.md, "Sample coverage"), but written piece by piece, so that an audit of millions of IDs
# never holds the whole document, or a Python object per occurrence, in memory.

from __future__ import annotations

import array
import contextlib
import itertools
import json
import os
import secrets
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from trainparity._internal.coverage.ids import CoreInput
from trainparity._internal.native.core import core

Write = Callable[[str], object]

_CHUNK = 65536  # list items, or trace occurrences, rendered per write


def _nested(value: Any, level: int) -> str:
    """JSON of a small value as it appears `level` indents deep in an indent=2 document."""
    return json.dumps(value, indent=2, sort_keys=True).replace("\n", "\n" + "  " * level)


def _rank_list(ranks: Iterable[int]) -> str:
    return "[\n" + ",\n".join(f"        {rank}" for rank in ranks) + "\n      ]"


def _write_list(write: Write, key: str, blocks: Iterable[str], last: bool = False) -> None:
    """A top-level list whose items are already rendered at list-item depth."""
    items = iter(blocks)
    chunk = list(itertools.islice(items, _CHUNK))
    if not chunk:
        write(f'  "{key}": []')
    else:
        write(f'  "{key}": [\n')
        while chunk:  # one write per chunk: many small writes cost more than the rendering
            write(",\n".join(chunk))
            chunk = list(itertools.islice(items, _CHUNK))
            if chunk:
                write(",\n")
        write("\n  ]")
    write("\n" if last else ",\n")


class _Renderer:
    """Renders IDs and the per-ID lists of the core's details."""

    def __init__(self, source: CoreInput, details: dict[str, Any]) -> None:
        self.source = source
        self.groups = details["groups"]
        self.missing_keys = memoryview(details["missing_keys"]).cast("q")
        # Keys that are the int IDs themselves render as themselves.
        self.id_json: Callable[[int], str] = (
            str if source.sample_ids is None else lambda key: json.dumps(source.sample_ids[key])
        )

    def ranks(self, codes: Iterable[int]) -> list[int]:
        return sorted(self.source.rank_values[code] for code in codes)

    def ids(self, keys: Iterable[int]) -> Iterator[str]:
        return (f"    {self.id_json(key)}" for key in keys)

    def flagged(self, flag: int) -> Iterator[tuple[Any, ...]]:
        return (group for group in self.groups if group[1] & flag)

    def repeated(self) -> Iterator[str]:
        for key, _flags, count, codes, _same in self.flagged(core.COVERAGE_REPEATED):
            yield (
                f'    {{\n      "occurrence_count": {count},\n'
                f'      "ranks": {_rank_list(self.ranks(codes))},\n'
                f'      "sample_id": {self.id_json(key)}\n    }}'
            )

    def same_rank(self) -> Iterator[str]:
        for key, _flags, _count, _codes, same in self.flagged(core.COVERAGE_SAME_RANK):
            for rank in self.ranks(same):
                yield (
                    f'    {{\n      "rank": {rank},\n      "sample_id": {self.id_json(key)}\n    }}'
                )

    def cross_rank(self) -> Iterator[str]:
        for key, _flags, _count, codes, _same in self.flagged(core.COVERAGE_CROSS_RANK):
            yield (
                f'    {{\n      "ranks": {_rank_list(self.ranks(codes))},\n'
                f'      "sample_id": {self.id_json(key)}\n    }}'
            )

    def unexpected(self) -> Iterator[str]:
        return self.ids(group[0] for group in self.flagged(core.COVERAGE_UNEXPECTED))

    def write_traces(self, write: Write) -> None:
        """Every observed ID with its occurrences in input order, IDs in ID order."""
        source = self.source
        if source.total == 0:
            write('  "traces": [],\n')
            return
        rank_count = len(source.rank_values)
        order = core.coverage_trace_order(source.segments, rank_count)
        rank_values = array.array("q", source.rank_values).tobytes()
        id_texts = None
        if source.sample_ids is not None:
            id_texts = [json.dumps(sample_id) for sample_id in source.sample_ids]
        write('  "traces": [\n')
        start = 0
        while start < source.total:
            text, start = core.coverage_render_traces(
                source.segments, rank_count, order, start, _CHUNK, rank_values, id_texts
            )
            write(text)
        write("\n  ],\n")


def _write_document(
    write: Write, header: dict[str, Any], source: CoreInput, details: dict[str, Any]
) -> None:
    render = _Renderer(source, details)
    write("{\n")
    write(f'  "actual_padding_count": {header["actual_padding_count"]},\n')
    _write_list(write, "cross_rank_overlaps", render.cross_rank())
    write(f'  "environment": {_nested(header["environment"], 1)},\n')
    if source.universe is None:
        write('  "expected_ids": null,\n')
    else:
        _write_list(write, "expected_ids", render.ids(source.expected_keys()))
    write(f'  "first_violation": {_nested(header["first_violation"], 1)},\n')
    _write_list(write, "missing_ids", render.ids(render.missing_keys))
    write(f'  "outcome": {json.dumps(header["outcome"])},\n')
    write(f'  "policy": {json.dumps(header["policy"])},\n')
    _write_list(write, "repeated_ids", render.repeated())
    _write_list(write, "same_rank_duplicates", render.same_rank())
    write(f'  "schema_version": {header["schema_version"]},\n')
    render.write_traces(write)
    write(f'  "trainparity_version": {json.dumps(header["trainparity_version"])},\n')
    _write_list(write, "unexpected_ids", render.unexpected(), last=True)
    write("}\n")


def write_evidence(
    path: Path, header: dict[str, Any], source: CoreInput, details: dict[str, Any]
) -> None:
    """Writes the evidence of one audit to `path` (parents created); raises OSError.

    header: schema_version, trainparity_version, outcome, policy, first_violation
    (dict or None), actual_padding_count and environment (the fingerprint). The document appears under `path`
    only once complete: it is written to a temporary sibling and renamed over it.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "x", encoding="utf-8", newline="", buffering=1 << 20) as out:
            _write_document(out.write, header, source, details)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
