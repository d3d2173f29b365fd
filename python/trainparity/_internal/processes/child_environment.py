"""The environment of a check's children: the parent's, the caller's overrides, the case's directory."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from trainparity._internal.cases.loading import CaseSetupError, CaseSetupTypeError, case_module_name


def child_environment(
    spec: str | type | None, environment: Mapping[str, str] | None
) -> dict[str, str]:
    """`os.environ` overridden by `environment`, with the loaded case module's directory on PYTHONPATH.

    `spec` is "module:name" (a case class, a command case's observer), a case
    class (a `__main__` one adds the script's directory, whose modules the
    class may use), or None.
    Raises TypeError/ValueError for keys or values that are not str, empty
    keys, and `=` or NUL where the OS cannot carry them (CONTRACT §6.2, §6.5).
    Call after the case was imported, so its module file is known.
    """
    variables = dict(os.environ)
    for key, value in dict(environment or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise CaseSetupTypeError(
                f"environment keys and values must be str, got {key!r}: {value!r}",
                field="environment",
            )
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise CaseSetupError(
                f"invalid environment variable name or value: {key!r}", field="environment"
            )
        variables[key] = value
    if spec is None:
        return variables
    module_file = getattr(sys.modules.get(case_module_name(spec)), "__file__", None)
    if module_file:
        case_directory = str(Path(module_file).resolve().parent)
        existing = variables.get("PYTHONPATH")
        variables["PYTHONPATH"] = case_directory + (os.pathsep + existing if existing else "")
    return variables
