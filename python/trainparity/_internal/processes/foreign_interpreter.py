"""The interpreter a failed phase ran, named when it is not the check's and a module was missing.

`ModuleNotFoundError: No module named 'torch'` from a phase usually means the
phase ran another Python than the one running the check: `python` found on
PATH without the venv activated, or a path to another installation. The
message then says which interpreter ran and which one the check is.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence

from trainparity._internal.cases.command_program import is_python

__all__ = ["foreign_interpreter_hint"]

_MISSING_MODULE = "ModuleNotFoundError"


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
