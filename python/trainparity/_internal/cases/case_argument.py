"""A check's `case` argument (a spec, a case class or a CommandCase) as its report and its children name it."""

from __future__ import annotations

from pathlib import Path

from trainparity._internal.cases.case_class import (
    importable_spec,
    reported_class,
    write_class_by_value,
)
from trainparity._internal.cases.command_case import CommandCase, case_names

__all__ = ["CaseArgument", "children_case_spec", "reported_case"]

# What check_resume, check_runs and check_accumulation accept as `case`.
CaseArgument = str | type | CommandCase


def reported_case(case: CaseArgument) -> str:
    """The report's `case`: the spec, `<by value> __main__.MyCase`, or a command case's template."""
    if isinstance(case, type):
        return reported_class(case)
    if isinstance(case, (str, CommandCase)):
        return case_names(case)[0]
    # Not a case at all: loading says so as the check's setup error. (Not its repr: that
    # holds a memory address, and the same input must give the same report.)
    return f"<not a case: {type(case).__qualname__}>"


def children_case_spec(case: CaseArgument, run_root: Path) -> str:
    """The spec the observer and the workers load the case by.

    A class that cannot be imported is pickled into `run_root` here, so that
    it lives, and is removed, with the check's run directory.
    """
    if isinstance(case, type):
        spec = importable_spec(case)
        return spec if spec is not None else write_class_by_value(case, run_root)
    return case_names(case)[1]
