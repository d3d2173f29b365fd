"""Why a training child failed, in its ERROR message: its stderr's last lines, where its log is.

The run directory is removed after a check unless the user keeps it
(`work_dir`), so the evidence a user needs (the traceback) has to travel in
the message itself, read before the directory goes.

`ModuleNotFoundError: No module named 'torch'` from a phase usually means the
phase ran another Python than the one running the check: `python` found on
PATH without the venv activated, or a path to another installation. The
message then says which interpreter ran and which one the check is.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainparity._internal.cases.command_program import is_python
from trainparity._internal.error_text import without_terminal_styling

__all__ = [
    "HEADLINE_SCAN_LINES",
    "TAIL_LINES",
    "directory_listing",
    "exception_line",
    "exit_message",
    "explained_failure",
    "failure_block",
    "foreign_interpreter_hint",
    "log_tail",
    "shown_path",
    "timeout_message",
]

TAIL_LINES = 20
# How far back the headline looks for a traceback: an exception whose message runs over
# many lines (torch.load's refusal) ends the log with its last message line, not its type.
HEADLINE_SCAN_LINES = 200
_TRACEBACK_HEADER = "Traceback (most recent call last):"
# Without a traceback header in view (a deep traceback's top was cut), an exception line is
# a dotted type name at the line's start that reads like an exception's, then `: text`.
_EXCEPTION_LINE = re.compile(
    r"(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure)(?::\s|$)"
)
# A traceback's last 20 lines fit easily; a log of megabytes must not be read whole.
_TAIL_BYTES = 64 * 1024
_LINE_CHARACTERS = 500
_LISTED_ENTRIES = 20
_MISSING_MODULE = "ModuleNotFoundError"


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


def exception_line(lines: Sequence[str]) -> str | None:
    """The one-line reason in a child's last stderr lines: the exception line of its last traceback.

    That is the first line at column 0 after the last `Traceback (most recent
    call last):` (frames are indented), e.g. `_pickle.UnpicklingError: Weights
    only load failed...` when the log goes on with the rest of a multi-line
    message. Without a traceback header, the last line that reads like an
    exception's; failing that, the last line (a `sys.exit("...")` text).
    """
    if not lines:
        return None
    headers = [index for index, line in enumerate(lines) if line.rstrip() == _TRACEBACK_HEADER]
    if headers:
        for line in lines[headers[-1] + 1 :]:
            if line.strip() and not line[0].isspace():
                return _reason(line)
    for line in reversed(lines):
        if _EXCEPTION_LINE.match(line):
            return _reason(line)
    return _reason(lines[-1])


def _reason(line: str) -> str:
    return without_terminal_styling(line).strip()


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


def timeout_message(name: str) -> str:
    """The first line of a child's ERROR when it ran past the check's timeout."""
    return f"{name} child exceeded timeout"


def exit_message(name: str, returncode: int) -> str:
    """The first line of a child's ERROR when it exited with another status than 0."""
    return f"{name} child exited with status {returncode}"


def explained_failure(
    message: str, label: str, log: Path, *, kept: bool, with_reason: bool = True
) -> str:
    """`message`, then on the lines below it the last lines of the child's log `log`.

    The first line ends with the exception line of the child's last traceback
    (see exception_line) when `message` has no detail yet and `with_reason`
    (a timed-out child's last line is no reason). Read now, before the run
    directory is removed.
    """
    scanned = log_tail(log, HEADLINE_SCAN_LINES)
    reason = exception_line(scanned) if with_reason and ": " not in message else None
    headline = f"{message}: {reason}" if reason else message
    return "\n".join([headline, failure_block(label, scanned[-TAIL_LINES:], log, kept=kept)])


def shown_path(path: Path, run_root: Path, *, kept: bool) -> str:
    """`path` for a message: whole under a kept work_dir; else from the run root, whose
    temporary name would make two reports of the same inputs differ."""
    if kept or not path.is_relative_to(run_root):
        return str(path)
    return str(path.relative_to(run_root))


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


def foreign_interpreter_hint(
    argv: Sequence[str], environment: Mapping[str, str], stderr_tail: Sequence[str]
) -> str | None:
    """A line naming the phase's interpreter, or None (no missing module, or the check's own)."""
    if not argv or not any(_MISSING_MODULE in line for line in stderr_tail):
        return None
    program = argv[0]
    if os.sep not in program:
        program = shutil.which(program, path=environment.get("PATH", os.defpath)) or program
    if not is_python(program) or _installation(program) == _installation(sys.executable):
        return None
    return (
        f"the phase ran the interpreter {program}, not the one running this check "
        f"({sys.executable}), and a module was missing there: start the command with `python` "
        "(in a command template: the check's interpreter), give the check's interpreter's path, "
        "or install the module for that interpreter"
    )


def _installation(program: str) -> str:
    """What tells two interpreters apart: a venv's directory (its python is a link to the
    base's, so the link's target would call the venv and its base the same), else the file."""
    path = os.path.abspath(program)
    root = os.path.dirname(os.path.dirname(path))
    if os.path.isfile(os.path.join(root, "pyvenv.cfg")):
        return root
    return os.path.realpath(path)
