"""Machine reports: a result as a report dictionary, written as sorted, indented JSON, replaced atomically."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from trainparity._internal.outcomes import Outcome
from trainparity._internal.version import add_report_metadata


def report_text(payload: dict[str, Any]) -> str:
    """The exact text of a report file: sorted keys, two-space indent, trailing newline."""
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"


def write_report(path: str | os.PathLike[str], payload: dict[str, Any]) -> int:
    """Write `payload` to `path` via `<path>.tmp` and a rename; returns the byte size."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = report_text(payload).encode("utf-8")
    temporary = target.with_name(target.name + ".tmp")
    try:
        with open(temporary, "wb") as stream:
            stream.write(data)
        os.replace(temporary, target)
    except BaseException:  # e.g. the path is a directory: leave no <path>.tmp behind
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return len(data)


def report_dict(result: Any) -> dict[str, Any]:
    """`{"schema_version", "trainparity_version", **fields}` with outcome as its string value.

    Like dataclasses.asdict: nested dataclasses become dicts, tuples stay tuples
    (they become JSON arrays when serialised). Fields marked
    `metadata={"reported": False}` are left out, at any depth, and so are those
    marked `{"omitted_when_none": True}` while None and `{"omitted_when_empty":
    True}` while empty (keys added later that must not change the reports
    written before them, e.g. a process row's `job_id` and `nodes`).
    """
    fields = _reported(result)
    fields["outcome"] = str(Outcome(fields["outcome"]).value)
    return add_report_metadata(fields)


def _reported(value: Any) -> Any:
    """dataclasses.asdict's copy of `value`, leaving out the fields their metadata omits."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: _reported(item)
            for field in dataclasses.fields(value)
            if not _omitted(field, item := getattr(value, field.name))
        }
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
        return type(value)(*(_reported(item) for item in value))
    if isinstance(value, (list, tuple)):
        return type(value)(_reported(item) for item in value)
    if isinstance(value, dict):
        return type(value)((_reported(key), _reported(item)) for key, item in value.items())
    return copy.deepcopy(value)


def _omitted(field: dataclasses.Field, value: Any) -> bool:
    metadata = field.metadata
    return (
        not metadata.get("reported", True)
        or (bool(metadata.get("omitted_when_none")) and value is None)
        or (bool(metadata.get("omitted_when_empty")) and not value)
    )
