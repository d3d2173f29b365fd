"""A case given as a class: by its module path when a fresh interpreter can import it, else by value.

`check_resume(MyCase)` works wherever MyCase was defined. A class that a
fresh interpreter can import (its module is not `__main__` and its
qualified name leads back to it) becomes the spec `"module:QualName"`, as
if that string had been passed. A class defined in `__main__` (a notebook
cell, a script run as `python script.py`) or inside a function cannot be
imported by the check's children: it is pickled by value with cloudpickle
(a dependency of trainparity) into a file in the check's run
directory, and the observer and the workers unpickle it from there.

This module raises plain exceptions; cases.loading turns them into the
check's CaseImportError.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = [
    "BY_VALUE_FILE",
    "BY_VALUE_PREFIX",
    "BY_VALUE_REPORTED",
    "INSTALL_HINT",
    "class_by_value",
    "importable_spec",
    "pickled_class",
    "reported_class",
    "write_class_by_value",
]

# The children's spec of a class sent by value: this prefix, then the pickle file's path.
BY_VALUE_PREFIX = "by-value:"
BY_VALUE_FILE = "case_class.cloudpickle"
# The report's `case` of a class sent by value: "<by value> __main__.MyCase". It cannot be
# mistaken for a spec (no spec starts with "<"), and it says that the class was not imported.
BY_VALUE_REPORTED = "<by value> "
INSTALL_HINT = "pip install cloudpickle (a dependency of trainparity: reinstall it)"


def importable_spec(case_class: type) -> str | None:
    """`"module:QualName"` when a fresh interpreter can import `case_class` so, else None.

    `__main__` is a different module in every interpreter, a class defined
    inside a function (`<locals>`) has no name a child could look up, and a
    module without a file (made in memory) cannot be imported again.
    """
    module_name, qualified_name = case_class.__module__, case_class.__qualname__
    if module_name == "__main__" or "<locals>" in qualified_name:
        return None
    module = sys.modules.get(module_name)
    if getattr(module, "__file__", None) is None:
        return None
    target: object = module
    for attribute in qualified_name.split("."):
        target = getattr(target, attribute, None)
    # Redefined since import (a reloaded module, a shadowing name): the name leads elsewhere.
    return f"{module_name}:{qualified_name}" if target is case_class else None


def reported_class(case_class: type) -> str:
    """The report's `case`: the spec of an importable class, else `<by value> module.QualName`."""
    spec = importable_spec(case_class)
    if spec is not None:
        return spec
    return f"{BY_VALUE_REPORTED}{case_class.__module__}.{case_class.__qualname__}"


def pickled_class(case_class: type) -> bytes:
    """`case_class` by value, with what it uses from `__main__` (cloudpickle).

    ImportError (saying what to install) without cloudpickle; the pickler's
    own error for something it cannot carry (an open file, a lock).
    """
    try:
        import cloudpickle
    except ImportError:
        raise ImportError(
            f"{case_class.__qualname__} is defined in {case_class.__module__}, which the "
            f"check's processes cannot import, so it goes to them by value with cloudpickle: "
            f"{INSTALL_HINT}, or move the class into a module and pass it from there"
        ) from None
    # Modules are pickled by reference: only what the children cannot import goes by value.
    return cloudpickle.dumps(case_class)


def write_class_by_value(case_class: type, directory: Path) -> str:
    """Pickle `case_class` into `directory`; the spec the children load it by."""
    path = Path(directory) / BY_VALUE_FILE
    path.write_bytes(pickled_class(case_class))
    return f"{BY_VALUE_PREFIX}{path}"


def class_by_value(spec: str) -> type:
    """The class a `by-value:PATH` spec holds (in a child of the check).

    Unpickling imports the modules the class refers to by reference (torch,
    the user's helper modules): their ImportError means the child cannot see
    a module the check's own process could.
    """
    import cloudpickle

    path = Path(spec.removeprefix(BY_VALUE_PREFIX))
    case_class = cloudpickle.loads(path.read_bytes())
    if not isinstance(case_class, type):
        raise TypeError(f"{path} holds a {type(case_class).__name__}, not a case class")
    return case_class
