"""Command templates: a training command line with `{placeholders}` filled per phase.

`python train.py --ckpt {checkpoint} --end-step {end_step} --resume {resume_from?}`
is a case's `command(plan)` written as one line. Placeholders are whole
`{name}` fields inside any argument (`--ckpt={checkpoint}` works too);
`{{` and `}}` stand for literal braces. `{resume_from?}` is optional: for a
phase with nothing to resume, its argument is dropped, together with the
flag right before it when it stands alone (`--resume {resume_from?}`).
Templates are checked when they are made, so a typo is a usage error before
any process runs, not a training script that fails four times.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from trainparity._internal.cases.loading import CaseSetupError

__all__ = ["COMMAND_FIELDS", "OPTIONAL_RESUME", "CommandTemplate", "fill"]

OPTIONAL_RESUME = "resume_from?"
# What a phase knows (ProcessExecutionPlan) and the case's checkpoint location.
COMMAND_FIELDS = ("checkpoint", "cwd", "end_step", "phase", OPTIONAL_RESUME, "run_dir")
_FIELD = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def fields_of(text: str, *, what: str) -> list[str]:
    """The placeholder names in `text`, in order; a lone `{` or `}` is a usage error."""
    names = []
    for match in _FIELD.finditer(text):
        token = match.group(0)
        if token in ("{{", "}}"):
            continue
        if match.group(1) is None:
            raise CaseSetupError(
                f"{what} {text!r} has an unmatched {token!r}; write {token * 2} for a literal brace",
                field="command",
            )
        names.append(match.group(1))
    return names


def fill(text: str, values: Mapping[str, str]) -> str:
    """`text` with every placeholder replaced by its value (names were checked before)."""

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        return values[match.group(1)]

    return _FIELD.sub(replace, text)


@dataclass(frozen=True)
class CommandTemplate:
    """A validated argv template; `argv(values)` fills it for one phase."""

    arguments: tuple[str, ...]

    @classmethod
    def parse(cls, arguments: Sequence[str]) -> CommandTemplate:
        if isinstance(arguments, str) or not arguments:
            raise CaseSetupError(
                "the command template is empty: give the training command after `--`, "
                "e.g. -- python train.py --ckpt {checkpoint} --end-step {end_step}",
                field="command",
            )
        for argument in arguments:
            if not isinstance(argument, str):
                raise CaseSetupError(
                    f"command template arguments must be str, got {argument!r}", field="command"
                )
            for name in fields_of(argument, what="command argument"):
                if name not in COMMAND_FIELDS:
                    hint = " (write {resume_from?}: it is empty for phases that start fresh)"
                    raise CaseSetupError(
                        f"unknown placeholder {{{name}}} in command argument {argument!r}; "
                        f"known: {', '.join('{' + known + '}' for known in COMMAND_FIELDS)}"
                        + (hint if name == "resume_from" else ""),
                        field="command",
                    )
        return cls(tuple(arguments))

    def uses(self, name: str) -> bool:
        return any(name in fields_of(argument, what="") for argument in self.arguments)

    def argv(self, values: Mapping[str, str | None]) -> list[str]:
        """The phase's argv; `values[OPTIONAL_RESUME]` None drops the resume argument and its flag."""
        resume = values.get(OPTIONAL_RESUME)
        filled: list[str] = []
        for argument in self.arguments:
            if resume is None and OPTIONAL_RESUME in fields_of(argument, what=""):
                if argument == "{" + OPTIONAL_RESUME + "}" and filled and _is_flag(filled[-1]):
                    filled.pop()
                continue
            filled.append(fill(argument, {**values, OPTIONAL_RESUME: resume or ""}))  # type: ignore[dict-item]
        return filled


def _is_flag(argument: str) -> bool:
    """`--resume` or `-r`, not a negative number such as `-1`."""
    return argument.startswith("-") and not argument.lstrip("-")[:1].isdigit() and argument != "-"
