"""Loading a case from its `"package.module:ClassName"` spec (docs/compatibility.md, "Surface"), or from the class itself.

A check may also be given the class (`check_resume(MyCase)`): the check's
own process instantiates it directly, and its children load it by the spec
cases.case_class gives it, `"module:QualName"` or `by-value:PATH`.

A case that cannot be loaded or set up ends the check with an ERROR whose
message says the cause and what to do (`setup_failure`).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.cases.case_class import (
    BY_VALUE_PREFIX,
    BY_VALUE_REPORTED,
    class_by_value,
    importable_spec,
    pickled_class,
    reported_class,
)
from trainparity._internal.error_text import error_text
from trainparity._internal.protocols import AccumulationCase, ProcessResumeCase, RunsCase

__all__ = [
    "CaseImportError",
    "CaseSetupError",
    "CaseSetupTypeError",
    "SetupFailure",
    "load_accumulation_case",
    "load_process_case",
    "load_runs_case",
    "setup_failure",
]


class CaseSetupError(ValueError):
    """The user's case or check arguments cannot run; `field` names the input at fault.

    A check returns these as ERROR results (docs/compatibility.md, "check_resume") that say what was
    wrong; the command line exits 4 (usage error) on them.
    """

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class CaseSetupTypeError(CaseSetupError, TypeError):
    """A setup input of the wrong type (e.g. a str `split_step`)."""


class CaseImportError(CaseSetupError):
    """The case spec is malformed, cannot be imported, or does not name a usable class."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="case")


def load_process_case(spec: str | type) -> ProcessResumeCase:
    """Import (or take), instantiate and protocol-check a resume case."""
    return _load(spec, ProcessResumeCase, "ProcessResumeCase")


def load_accumulation_case(spec: str | type) -> AccumulationCase:
    """Import (or take), instantiate and protocol-check an accumulation case."""
    return _load(spec, AccumulationCase, "AccumulationCase")


def load_runs_case(spec: str | type) -> RunsCase:
    """Import (or take), instantiate and protocol-check a check_runs case (a resume case qualifies)."""
    return _load(spec, RunsCase, "RunsCase")


def case_module_name(spec: str | type) -> str:
    """The module part of a well-formed spec, or a case class's module."""
    if isinstance(spec, type):
        return spec.__module__
    return _split(spec)[0]


def _split(spec: object) -> tuple[str, str]:
    if isinstance(spec, str) and spec.startswith(BY_VALUE_REPORTED):
        # A report's `case` read back (explain(result) without case=): the class is not in it.
        raise CaseImportError(
            f"{spec!r} went to the check's processes by value and cannot be loaded from its "
            "name: pass the class again, e.g. explain(result, case=MyCase)"
        )
    if not isinstance(spec, str):
        raise CaseImportError(
            "case must use the form 'package.module:ClassName', or be a case class or a "
            f"CommandCase, not {_kind_of(spec)}"
        )
    module_name, separator, attribute = spec.partition(":")
    if not separator or not module_name or not attribute:
        raise CaseImportError("case must use the form 'package.module:ClassName'")
    return module_name, attribute


def _kind_of(value: object) -> str:
    kind = type(value)
    if kind.__module__ == "builtins":
        return f"a {kind.__name__}"
    # The likeliest slip: MyCase() where MyCase was meant.
    return f"an instance of {kind.__qualname__} (pass the class itself)"


def _load(spec: str | type, protocol: type, protocol_name: str):
    target, shown = _target(spec)
    if not isinstance(target, type):
        raise CaseImportError(f"case target {shown!r} must be a class")
    try:
        case = target()
    except TypeError as error:
        raise CaseImportError(
            f"case class {shown!r} must have a zero-argument constructor"
        ) from error
    if not isinstance(case, protocol):
        missing = ", ".join(_missing_members(case, protocol))
        raise CaseImportError(
            f"case {shown!r} does not implement {protocol_name}: it has no {missing}"
        )
    return case


def _target(spec: str | type) -> tuple[object, str]:
    """What `spec` names, and how messages show it: a class given, sent by value, or imported."""
    if isinstance(spec, type):
        shown = reported_class(spec)
        if importable_spec(spec) is None:
            _check_by_value(spec, shown)
        return spec, shown
    if isinstance(spec, str) and spec.startswith(BY_VALUE_PREFIX):
        try:
            target = class_by_value(spec)
        except Exception as error:  # unpickling imports what the class refers to
            raise CaseImportError(
                f"cannot load the case class sent by value ({spec.removeprefix(BY_VALUE_PREFIX)}):"
                f" {error_text(error)}"
            ) from None
        return target, reported_class(target)
    module_name, attribute = _split(spec)
    try:
        target = importlib.import_module(module_name)
        # A dotted attribute reaches a nested class ("module:Outer.Inner").
        for name in attribute.split("."):
            target = getattr(target, name)
    except (ImportError, AttributeError) as error:
        raise CaseImportError(f"cannot import case {spec!r}: {error}") from error
    return target, spec


def _check_by_value(case_class: type, shown: str) -> None:
    """A setup error now, before anything runs, for a class that cannot go by value."""
    try:
        pickled_class(case_class)
    except ImportError as error:  # no cloudpickle: the text says what to install
        raise CaseImportError(str(error)) from None
    except Exception as error:
        raise CaseImportError(
            f"case class {shown!r} cannot be sent to the check's processes by value: "
            f"{error_text(error)}; move what it cannot carry (an open file, a lock) into "
            "build/command, or the class into a module"
        ) from None


def _missing_members(case: object, protocol: type) -> list[str]:
    """The protocol's members `case` lacks, methods with their parameters: `checkpoint_path(run_dir)`."""
    missing = [name for name in protocol.__annotations__ if not hasattr(case, name)]
    for name, member in vars(protocol).items():
        if callable(member) and not name.startswith("_") and not hasattr(case, name):
            parameters = list(inspect.signature(member).parameters)[1:]
            missing.append(f"{name}({', '.join(parameters)})")
    return missing


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
