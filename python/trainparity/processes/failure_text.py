"""Why a training child failed, in its ERROR message: its stderr's last lines, where its log is.

The run directory is removed after a check unless the user keeps it
(`work_dir`), so the evidence a user needs (the traceback) has to travel in
the message itself, read before the directory goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

__all__ = ["TAIL_LINES", "directory_listing", "failure_block", "last_line", "log_tail"]

TAIL_LINES = 20
# A traceback's last 20 lines fit easily; a log of megabytes must not be read whole.
_TAIL_BYTES = 64 * 1024
_LINE_CHARACTERS = 500
_LISTED_ENTRIES = 20


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` non-blank lines of a log file (each cut at 500 characters); [] if unreadable."""
    try:
        with open(path, "rb") as stream:
            stream.seek(0, 2)
            size = stream.tell()
            stream.seek(max(0, size - _TAIL_BYTES))
            data = stream.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    kept = [line.rstrip()[:_LINE_CHARACTERS] for line in text.splitlines() if line.strip()]
    if size > _TAIL_BYTES and kept:
        kept = kept[1:]  # the first line read may have been cut in the middle
    return kept[-lines:]


def last_line(tail: Sequence[str]) -> str | None:
    """A traceback's last line (`RuntimeError: boom`), the usual one-line reason."""
    return tail[-1].strip() if tail else None


def failure_block(label: str, tail: Sequence[str], log: Path, *, kept: bool) -> str:
    """`last N lines of <label>:` and the indented lines, then where the full log is (or that it is gone)."""
    if not tail:
        return f"{label} is empty"
    lines = [f"last {len(tail)} lines of {label}:", *(f"  {line}" for line in tail)]
    if kept:
        lines.append(f"full log: {log}")
    else:
        lines.append(
            "full log: removed with the run directory; pass work_dir (--work-dir) to keep it"
        )
    return "\n".join(lines)


def directory_listing(directory: Path) -> str:
    """The entries of a phase directory, sorted: what the child did write."""
    try:
        names = sorted(
            entry.name + ("/" if entry.is_dir() else "") for entry in directory.iterdir()
        )
    except OSError as error:
        return f"(could not list {directory}: {error.strerror})"
    if not names:
        return "(nothing)"
    shown = ", ".join(names[:_LISTED_ENTRIES])
    if len(names) > _LISTED_ENTRIES:
        shown += f", ... {len(names) - _LISTED_ENTRIES} more"
    return shown
