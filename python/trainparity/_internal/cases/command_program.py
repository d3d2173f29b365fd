"""What a command template's first words run, and from where.

`python` or `python3` as the first word is the interpreter running the check
(`sys.executable`), not whatever the children's PATH finds first: a check
started as `.venv/bin/trainparity` without the venv activated would otherwise
train under the system's Python, without torch. For the same reason a
console script installed beside that interpreter (`torchrun` or another
launcher in the venv's `bin/`) is run from there. A path
(`/usr/bin/python3`, `./venv/bin/python`) is used as given, and any other
word (`bash`, another launcher) is looked up in the children's PATH as exec
would.

A phase that runs in its own run directory (`CommandCase(cwd="{run_dir}")`)
still finds what the user named from the check's directory: a relative
program path and the script of a Python interpreter (`train.py` in
`python -u train.py`) are made absolute against the check's cwd. No other
argument is touched: guessing which arguments are paths is what a template
says with `{cwd}` (`--data {cwd}/data`).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "CHECK_INTERPRETER_WORDS",
    "anchored",
    "beside_interpreter",
    "interpreter_description",
    "is_python",
    "with_check_interpreter",
]

CHECK_INTERPRETER_WORDS = frozenset({"python", "python3"})
# python3, python3.12, python3.13t: the name of a CPython executable.
_PYTHON_NAME = re.compile(r"python(\d+(\.\d+)?t?)?")
# CPython's options that take the next argument as their value (`python -W error x.py`).
_OPTIONS_WITH_VALUE = frozenset({"-W", "-X", "--check-hash-based-pycs"})
# CPython's options after which no script follows: the rest is a module's or code's.
_NO_SCRIPT_OPTIONS = frozenset({"-m", "-c", "-"})


def with_check_interpreter(argv: Sequence[str]) -> list[str]:
    """`argv` with a first word `python`/`python3` replaced by the check's own interpreter,
    and one that names a console script beside that interpreter by the script's path."""
    argv = list(argv)
    if argv and argv[0] in CHECK_INTERPRETER_WORDS and sys.executable:
        argv[0] = sys.executable
    elif argv and (beside := beside_interpreter(argv[0])) is not None:
        argv[0] = beside
    return argv


def beside_interpreter(word: str) -> str | None:
    """The executable `word` in the check's interpreter's directory (a venv's bin/), if any.

    The directory is the one `sys.executable` names, symlinks not followed: a
    venv's `bin/python` links to the base interpreter, but its console scripts
    live beside the link.
    """
    if not word or os.sep in word or "{" in word or not sys.executable:
        return None
    candidate = os.path.join(os.path.dirname(sys.executable), word)
    if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
        return candidate
    return None


def is_python(program: str) -> bool:
    """Whether `program` names a Python interpreter (by its file name)."""
    return _PYTHON_NAME.fullmatch(os.path.basename(program)) is not None


def anchored(argv: Sequence[str], directory: Path) -> list[str]:
    """`argv` with a relative program path and a Python script made absolute against `directory`."""
    argv = list(argv)
    if not argv:
        return argv
    if os.sep in argv[0] and not os.path.isabs(argv[0]):
        argv[0] = str(directory / argv[0])
    script = _script_index(argv) if is_python(argv[0]) else None
    if script is not None and not os.path.isabs(argv[script]):
        argv[script] = str(directory / argv[script])
    return argv


def interpreter_description(first_word: str, *, search_path: str | None, directory: Path) -> str:
    """The report's `command_interpreter`: what the phases exec for `first_word`, and why.

    `search_path` is the children's PATH; `directory` the check's cwd, which a
    relative path is resolved against (where the phase runs, or anchored there).
    """
    if first_word in CHECK_INTERPRETER_WORDS and sys.executable:
        return f"{sys.executable} ({first_word}: the interpreter running the check)"
    if "{" in first_word:
        return f"{first_word} (filled per phase)"
    beside = beside_interpreter(first_word)
    if beside is not None:
        return f"{beside} ({first_word}: installed beside the interpreter running the check)"
    if os.sep in first_word:
        return f"{directory / first_word} (a path given in the command)"
    found = shutil.which(first_word, path=search_path if search_path is not None else os.defpath)
    if found is None:
        return f"{first_word} (not found on the children's PATH)"
    return f"{found} ({first_word}: found on the children's PATH)"


def _script_index(argv: list[str]) -> int | None:
    """Where the script is in a Python interpreter's argv; None for `-m`, `-c`, stdin."""
    index = 1
    while index < len(argv):
        argument = argv[index]
        if argument in _NO_SCRIPT_OPTIONS or argument.startswith(("-c", "-m")):
            return None
        if not argument.startswith("-"):
            return index
        index += 2 if argument in _OPTIONS_WITH_VALUE else 1
    return None
