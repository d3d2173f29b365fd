"""CommandCase: a resume or runs case made from a command template, no case class needed.

`CommandCase(template=[...], checkpoint="{run_dir}/ck.pt", split_step=2, total_step=4)`
is what `trainparity resume --split-step 2 --total-step 4 --checkpoint
'{run_dir}/ck.pt' -- python train.py ...` builds. Its checkpoint is observed
by the default observer (a `torch.load`'d dict, weights only, or a DCP
directory through `load_dcp`) or by `observe="module:function"`. The
observer worker is a fresh interpreter: it gets the case back from `spec`,
a JSON text that holds every field, so nothing but the case's own values
crosses the process boundary.
"""

from __future__ import annotations

import importlib
import json
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trainparity.cases.command_template import (
    OPTIONAL_RESUME,
    CommandTemplate,
    fields_of,
    fill,
)
from trainparity.cases.loading import CaseImportError, CaseSetupError, CaseSetupTypeError
from trainparity.protocols import ProcessExecutionPlan

__all__ = [
    "COMMAND_CASE_PREFIX",
    "CommandCase",
    "case_names",
    "observe_default",
    "resolved_case",
]

COMMAND_CASE_PREFIX = "command-case:"
_RUN_DIR = "{run_dir}"


@dataclass(frozen=True)
class CommandCase:
    """A case whose `command(plan)` fills a template; usable wherever a case spec is.

    `template`: the argv template (placeholders {checkpoint}, {run_dir},
    {end_step}, {phase}, {cwd}, {resume_from?}). `checkpoint`: where a
    phase's checkpoint is, under `{run_dir}`. `split_step` is needed by
    check_resume only. `observe`: "module:function" called with the
    checkpoint path (imported from the check's cwd), None for the default
    observer. Bad templates raise CaseSetupError (a ValueError) here.
    """

    template: Sequence[str]
    checkpoint: str
    total_step: int
    split_step: int | None = None
    observe: str | None = None
    name: str = "command"
    parsed: CommandTemplate = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "template", tuple(self.template))
        object.__setattr__(self, "parsed", CommandTemplate.parse(self.template))
        _check_checkpoint(self.checkpoint)
        if not (self.parsed.uses("checkpoint") or self.parsed.uses("run_dir")):
            raise CaseSetupError(
                "the command never says where to save: give the script {checkpoint} "
                "(or {run_dir}), e.g. --ckpt {checkpoint}",
                field="command",
            )
        if self.split_step is not None:
            for needed, why in (
                ("end_step", "where each phase stops"),
                (OPTIONAL_RESUME, "what the resumed phase loads"),
            ):
                if not self.parsed.uses(needed):
                    raise CaseSetupError(
                        f"a resume check's command needs {{{needed}}}: it says {why}",
                        field="command",
                    )
        if self.observe is not None:
            module, separator, function = self.observe.partition(":")
            if not separator or not module or not function:
                raise CaseSetupError(
                    f"observe must name 'module:function', got {self.observe!r}", field="observe"
                )
        if not isinstance(self.name, str) or not self.name:
            raise CaseSetupTypeError("name must be a non-empty str", field="name")

    # The case protocol ---------------------------------------------------------------

    def command(self, plan: ProcessExecutionPlan) -> list[str]:
        values: dict[str, str | None] = {
            "checkpoint": str(self.checkpoint_path(plan.run_dir)),
            "cwd": str(plan.cwd),
            "end_step": str(plan.end_step),
            "phase": plan.phase,
            "run_dir": str(plan.run_dir),
            OPTIONAL_RESUME: None if plan.resume_from is None else str(plan.resume_from),
        }
        return self.parsed.argv(values)

    def checkpoint_path(self, run_dir: Path) -> Path:
        return Path(fill(self.checkpoint, {"run_dir": str(run_dir)}))

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        return self.observer()(path)

    def observer(self) -> Callable[[Path], Mapping[str, object]]:
        """The observe function: `observe` imported (CaseImportError if it cannot be), or the default."""
        if self.observe is None:
            return observe_default
        module_name, _, function_name = self.observe.partition(":")
        try:
            function = getattr(importlib.import_module(module_name), function_name)
        except (ImportError, AttributeError) as error:
            raise CaseImportError(f"cannot import observer {self.observe!r}: {error}") from error
        if not callable(function):
            raise CaseImportError(f"observer {self.observe!r} is not callable")
        return function

    # Identity -------------------------------------------------------------------------

    @property
    def spec(self) -> str:
        """This case as one string for the observer worker's `--case` (see from_spec)."""
        fields = {
            "checkpoint": self.checkpoint,
            "template": list(self.template),
            "name": self.name,
            "observe": self.observe,
            "split_step": self.split_step,
            "total_step": self.total_step,
        }
        return COMMAND_CASE_PREFIX + json.dumps(fields, sort_keys=True)

    @classmethod
    def from_spec(cls, spec: str) -> CommandCase:
        return cls(**json.loads(spec.removeprefix(COMMAND_CASE_PREFIX)))

    def describe(self) -> str:
        """The report's `case`: the template as a shell would show it (no machine paths)."""
        return shlex.join(self.template)


def resolved_case(case: str | CommandCase, load: Callable[[str], Any]) -> tuple[Any, str | None]:
    """The case object, and the "module:name" whose directory its children need on PYTHONPATH.

    A spec is imported with `load`; a command case's observer is imported
    now, so a bad `observe` is a setup error before anything runs.
    """
    if isinstance(case, CommandCase):
        case.observer()
        return case, case.observe
    return load(case), case


def case_names(case: str | CommandCase) -> tuple[str, str]:
    """(the report's `case`, the spec the observer worker loads) of a spec or a command case."""
    if isinstance(case, CommandCase):
        return case.describe(), case.spec
    return case, case


def observe_default(path: Path) -> dict[str, Any]:
    """A DCP directory through load_dcp, else a `torch.load`'d dict (weights only)."""
    import torch

    if path.is_dir():
        from trainparity.checkpoints.dcp import load_dcp

        return load_dcp(path)
    state = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(state, Mapping):
        raise TypeError(
            f"the default observer needs a checkpoint that holds a dict, {path} holds a "
            f"{type(state).__name__}: pass observe='module:function' (--observe)"
        )
    return dict(state)


def _check_checkpoint(template: str) -> None:
    if not isinstance(template, str):
        raise CaseSetupTypeError(f"checkpoint must be a str, got {template!r}", field="checkpoint")
    for name in fields_of(template, what="checkpoint"):
        if name != "run_dir":
            raise CaseSetupError(
                f"checkpoint {template!r} may use {{run_dir}} only, not {{{name}}}",
                field="checkpoint",
            )
    inside = template.removeprefix(_RUN_DIR).lstrip("/")
    parts = PurePosixPath(inside).parts
    if not template.startswith(_RUN_DIR + "/") or not parts or ".." in parts:
        raise CaseSetupError(
            f"checkpoint {template!r} is outside {{run_dir}}: every phase has its own run "
            "directory, so the checkpoint must be a path inside it, e.g. '{run_dir}/ck.pt'",
            field="checkpoint",
        )
