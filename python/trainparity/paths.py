"""Rendering of state paths (`model.layer[2].weight`, `extra["a.b"]`, `$`), and input-file checks."""

from __future__ import annotations

import json
import os
import stat

PathPart = str | int
StatePath = tuple[PathPart, ...]


def render_path(path: StatePath) -> str:
    """Render a path tuple exactly as reports show it (CONTRACT §4.6)."""
    if not path:
        return "$"
    rendered: list[str] = []
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            rendered.append(f"[{part}]")
        elif isinstance(part, str) and part.isidentifier():
            rendered.append(f".{part}" if rendered else part)
        else:
            rendered.append(f"[{json.dumps(str(part), ensure_ascii=False)}]")
    return "".join(rendered)


_SPECIAL_FILES = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def special_file_kind(path: str | os.PathLike[str]) -> str | None:
    """ "a FIFO", "a character device", ... for an existing special file, else None.

    Input files are memory-mapped or read whole: opening a FIFO without a
    writer blocks forever, and a device or pipe reports a size of 0. Missing
    paths and directories give None, so that opening them raises as usual.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    for test, kind in _SPECIAL_FILES:
        if test(mode):
            return kind
    return None
