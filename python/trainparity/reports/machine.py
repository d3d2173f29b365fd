"""Machine reports: a result as a report dictionary, written as sorted, indented JSON, replaced atomically."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from trainparity.outcomes import Outcome
from trainparity.version import add_report_metadata


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
    `metadata={"reported": False}` are left out, those marked
    `{"omitted_when_none": True}` when None, and so are a process row's
    `job_id` when None and `nodes` when empty.
    """
    fields = dataclasses.asdict(result)
    for field in dataclasses.fields(result):
        if not field.metadata.get("reported", True) or (
            field.metadata.get("omitted_when_none") and fields[field.name] is None
        ):
            del fields[field.name]
    fields["outcome"] = str(Outcome(fields["outcome"]).value)
    # A phase run by a scheduler names its job, a multi-node phase its nodes; other phases'
    # rows have neither key, so their reports keep the keys they always had.
    for row in fields.get("processes") or ():
        if isinstance(row, dict):
            for key, absent in (("job_id", None), ("nodes", ())):
                if key in row and row[key] == absent:
                    del row[key]
    return add_report_metadata(fields)
