"""Loading a case from its `"package.module:ClassName"` spec (CONTRACT §3)."""

from __future__ import annotations

import importlib
import inspect

from trainparity.protocols import AccumulationCase, ProcessResumeCase, RunsCase

__all__ = [
    "CaseImportError",
    "CaseSetupError",
    "CaseSetupTypeError",
    "load_accumulation_case",
    "load_process_case",
    "load_runs_case",
]


class CaseSetupError(ValueError):
    """The user's case or check arguments cannot run; `field` names the input at fault.

    A check returns these as ERROR results (CONTRACT §6.2) that say what was
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


def load_process_case(spec: str) -> ProcessResumeCase:
    """Import, instantiate and protocol-check a resume case."""
    return _load(spec, ProcessResumeCase, "ProcessResumeCase")


def load_accumulation_case(spec: str) -> AccumulationCase:
    """Import, instantiate and protocol-check an accumulation case."""
    return _load(spec, AccumulationCase, "AccumulationCase")


def load_runs_case(spec: str) -> RunsCase:
    """Import, instantiate and protocol-check a check_runs case (a resume case qualifies)."""
    return _load(spec, RunsCase, "RunsCase")


def case_module_name(spec: str) -> str:
    """The module part of a well-formed spec."""
    return _split(spec)[0]


def _split(spec: object) -> tuple[str, str]:
    if not isinstance(spec, str):
        raise CaseImportError("case must use the form 'package.module:ClassName'")
    module_name, separator, attribute = spec.partition(":")
    if not separator or not module_name or not attribute:
        raise CaseImportError("case must use the form 'package.module:ClassName'")
    return module_name, attribute


def _load(spec: str, protocol: type, protocol_name: str):
    module_name, attribute = _split(spec)
    try:
        module = importlib.import_module(module_name)
        target = getattr(module, attribute)
    except (ImportError, AttributeError) as error:
        raise CaseImportError(f"cannot import case {spec!r}: {error}") from error
    if not isinstance(target, type):
        raise CaseImportError(f"case target {spec!r} must be a class")
    try:
        case = target()
    except TypeError as error:
        raise CaseImportError(
            f"case class {spec!r} must have a zero-argument constructor"
        ) from error
    if not isinstance(case, protocol):
        missing = ", ".join(_missing_members(case, protocol))
        raise CaseImportError(
            f"case {spec!r} does not implement {protocol_name}: it has no {missing}"
        )
    return case


def _missing_members(case: object, protocol: type) -> list[str]:
    """The protocol's members `case` lacks, methods with their parameters: `checkpoint_path(run_dir)`."""
    missing = [name for name in protocol.__annotations__ if not hasattr(case, name)]
    for name, member in vars(protocol).items():
        if callable(member) and not name.startswith("_") and not hasattr(case, name):
            parameters = list(inspect.signature(member).parameters)[1:]
            missing.append(f"{name}({', '.join(parameters)})")
    return missing
