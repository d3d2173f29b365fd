"""A check's set-up failure as the ERROR message every check gives: the cause, and what to do."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.cases.loading import CaseImportError, CaseSetupError
from trainparity._internal.error_text import error_text

__all__ = ["SetupFailure", "setup_failure"]


@dataclass(frozen=True)
class SetupFailure:
    """Why a check could not start: its ERROR message, and the input at fault when the user's.

    `usage_field` is set for a CaseSetupError (bad case path, case shape, step
    numbers, arguments): the command line exits 4 on it. None means something
    went wrong while setting up (e.g. the case's module raised on import).
    """

    message: str
    usage_field: str | None


def setup_failure(prefix: str, error: Exception, *, command_dir: Path) -> SetupFailure:
    """`<prefix>case setup failed: <text>`, with where the case was looked up when it was not found.

    A CaseSetupError's text is ours and names the input, so it stands alone;
    any other exception (raised by the case's own code) keeps its type name.
    `command_dir` is the children's working directory (`cwd=`, `--cwd`).
    """
    is_usage = isinstance(error, CaseSetupError)
    message = f"{prefix}case setup failed: {error_text(error, with_type=not is_usage)}"
    if isinstance(error, CaseImportError) and isinstance(error.__cause__, ImportError):
        message += f" ({_lookup_hint(command_dir)})"
    return SetupFailure(message=message, usage_field=error.field if is_usage else None)


def _lookup_hint(command_dir: Path) -> str:
    # The parent imports the case from its own sys.path; the CLI puts --cwd first on it.
    if str(command_dir) in sys.path:
        return f"imported from {command_dir}; is the module in that directory?"
    return (
        f"imported from sys.path, which does not hold cwd {command_dir}: "
        "run from the directory that holds the module, or put it on sys.path"
    )
