"""Where a check's children run, and with what environment.

The environment: the parent's, the caller's overrides, the case's directory.

Where a training phase runs: every phase runs in the check's cwd (`plan.cwd`,
docs/compatibility.md, "check_resume") unless its case has `phase_cwd(plan)`, as
`CommandCase(cwd="{run_dir}")` has: then it runs there, for scripts that save
into their working directory. A phase run elsewhere gets the check's cwd
first on PYTHONPATH, so that `python -m package.module` still imports the
package it would have found from there.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from trainparity._internal.cases.loading import CaseSetupError, CaseSetupTypeError, case_module_name
from trainparity._internal.protocols import ProcessExecutionPlan

__all__ = ["child_environment", "phase_cwd", "phase_environment"]


def child_environment(
    spec: str | type | None, environment: Mapping[str, str] | None
) -> dict[str, str]:
    """`os.environ` overridden by `environment`, with the loaded case module's directory on PYTHONPATH.

    `spec` is "module:name" (a case class, a command case's observer), a case
    class (a `__main__` one adds the script's directory, whose modules the
    class may use), or None.
    Raises TypeError/ValueError for keys or values that are not str, empty
    keys, and `=` or NUL where the OS cannot carry them (docs/compatibility.md, "check_resume").
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
    name = case_module_name(spec)
    module_file = getattr(sys.modules.get(name), "__file__", None)
    if module_file:
        case_directory = str(import_root(name, Path(module_file)))
        existing = variables.get("PYTHONPATH")
        variables["PYTHONPATH"] = case_directory + (os.pathsep + existing if existing else "")
    return variables


def import_root(module_name: str, module_file: Path) -> Path:
    """The directory `module_name` is imported from: its file's directory for a top-level
    module, the directory above its top package for `package.module`.

    Only that directory goes on the children's PYTHONPATH: a case module's own
    directory inside a package would put its siblings first (a module named
    like a library, beside the case, would hide the library).
    """
    root = module_file.resolve().parent
    if module_file.name == "__init__.py":
        root = root.parent
    for _ in module_name.split(".")[1:]:
        root = root.parent
    return root


def phase_cwd(case: object, plan: ProcessExecutionPlan) -> Path:
    """The directory the phase of `plan` runs in; TypeError if the case's hook gives no Path."""
    hook = getattr(case, "phase_cwd", None)
    if hook is None:
        return plan.cwd
    directory = hook(plan)
    if not isinstance(directory, Path):
        raise TypeError(f"phase_cwd must return a pathlib.Path, got {type(directory).__name__}")
    return directory


def phase_environment(
    environment: Mapping[str, str], *, cwd: Path, check_cwd: Path
) -> dict[str, str]:
    """`environment`, with `check_cwd` first on PYTHONPATH when the phase runs elsewhere."""
    variables = dict(environment)
    if cwd != check_cwd:
        existing = variables.get("PYTHONPATH")
        variables["PYTHONPATH"] = str(check_cwd) + (os.pathsep + existing if existing else "")
    return variables
