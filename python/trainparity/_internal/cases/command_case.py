"""CommandCase: a resume or runs case made from a command template, no case class needed.

`CommandCase(template=[...], checkpoint="{run_dir}/ck.pt", split_step=2, total_step=4)`
is what `trainparity resume --split-step 2 --total-step 4 --checkpoint
'{run_dir}/ck.pt' -- python train.py ...` builds. `python` as the first word
is the interpreter running the check; with `cwd="{run_dir}"` (`--cd-run-dir`)
each phase runs in its own run directory (command_program.py says what is
resolved from where). Its checkpoint is observed
by the default observer (a `torch.load`'d dict, weights only, or a DCP or
ZeRO directory through `load_checkpoint_directory`) or by
`observe="module:function"`. The observer worker is a fresh interpreter: it gets the case back from `spec`,
a JSON text that holds every field, so nothing but the case's own values
crosses the process boundary.

A check's `case` argument is a spec, a case class or a CommandCase
(`CaseArgument`): `reported_case` and `children_case_spec` say how its report
and its children name each.
"""

from __future__ import annotations

import importlib
import json
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trainparity._internal.cases.case_class import (
    importable_spec,
    reported_class,
    write_class_by_value,
)
from trainparity._internal.cases.command_program import (
    anchored,
    interpreter_description,
    with_check_interpreter,
)
from trainparity._internal.cases.command_template import (
    COMMAND_FIELDS,
    OPTIONAL_RESUME,
    CommandTemplate,
    fields_of,
    fill,
)
from trainparity._internal.cases.loading import CaseImportError, CaseSetupError, CaseSetupTypeError
from trainparity._internal.protocols import ProcessExecutionPlan

__all__ = [
    "COMMAND_CASE_PREFIX",
    "CaseArgument",
    "CommandCase",
    "case_names",
    "children_case_spec",
    "clear_checkpoint",
    "command_report_fields",
    "observe_default",
    "reported_case",
    "resolved_case",
    "resumes_by_itself",
]

COMMAND_CASE_PREFIX = "command-case:"
_RUN_DIR = "{run_dir}"


@dataclass(frozen=True)
class CommandCase:
    """A case whose `command(plan)` fills a template; usable wherever a case spec is.

    `template`: the argv template (placeholders {checkpoint}, {run_dir},
    {end_step}, {phase}, {cwd}, {resume_from?}); a first word `python` or
    `python3` runs the interpreter running the check (sys.executable), a
    path runs as given. `checkpoint`: where a phase's checkpoint is, under
    `{run_dir}`. `split_step` is needed by check_resume only, whose template
    needs {end_step}; without {resume_from?} the job resumes by itself from
    what it finds at `checkpoint`, where the check stages the checkpoint to
    resume from (`resumes_by_itself`). `observe`:
    "module:function" called with the checkpoint path (imported from the
    check's cwd), None for the default observer. `cwd`: None, each phase runs
    in the check's cwd; "{run_dir}", each in its own run directory (for
    scripts that save into their working directory), with a relative program
    and the Python script still found from the check's cwd and that cwd on
    PYTHONPATH. Bad templates raise CaseSetupError (a ValueError) here.
    """

    template: Sequence[str]
    checkpoint: str
    total_step: int
    split_step: int | None = None
    observe: str | None = None
    name: str = "command"
    cwd: str | None = None
    parsed: CommandTemplate = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "template", tuple(self.template))
        object.__setattr__(self, "parsed", CommandTemplate.parse(self.template))
        _check_checkpoint(self.checkpoint)
        if self.cwd not in (None, _RUN_DIR):
            raise CaseSetupError(
                f"cwd must be None (each phase runs in the check's cwd) or {_RUN_DIR!r} (each "
                f"in its own run directory), got {self.cwd!r}",
                field="cwd",
            )
        saves_in_cwd = self.cwd == _RUN_DIR  # a script that saves into its cwd needs no path
        if not (saves_in_cwd or self.parsed.uses("checkpoint") or self.parsed.uses("run_dir")):
            raise CaseSetupError(
                "the command never says where to save: give the script {checkpoint} "
                "(or {run_dir}), e.g. --ckpt {checkpoint}; or, for a script that saves into "
                "its working directory, run each phase in its run directory "
                "(cwd='{run_dir}', --cd-run-dir)",
                field="command",
            )
        # Without {resume_from?} the job resumes by itself from what it finds at its checkpoint
        # path (resumes_by_itself); without {end_step} nothing tells a phase where to stop.
        if self.split_step is not None and not self.parsed.uses("end_step"):
            raise CaseSetupError(
                "a resume check's command needs {end_step}: it says where each phase stops, "
                "e.g. --end-step {end_step}",
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

    @property
    def resumes_by_itself(self) -> bool:
        """Whether the job finds what to resume from by itself: the template has no
        {resume_from?}, so a resumed phase runs the same command, and the check stages the
        checkpoint of the phase before it at its own checkpoint path (`resume_from` None)."""
        return not self.parsed.uses(OPTIONAL_RESUME)

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
        argv = with_check_interpreter(self.parsed.argv(values))
        return anchored(argv, plan.cwd) if self.cwd == _RUN_DIR else argv

    def phase_cwd(self, plan: ProcessExecutionPlan) -> Path:
        """Where the phase runs: its run directory under cwd="{run_dir}", else the check's cwd."""
        return plan.run_dir if self.cwd == _RUN_DIR else plan.cwd

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
        return COMMAND_CASE_PREFIX + json.dumps(self.fields(), sort_keys=True)

    def fields(self) -> dict[str, Any]:
        """Every field, as JSON holds them: `CommandCase(**fields)` is this case again (the
        report's `command_case`, which `trainparity explain REPORT.json` reruns)."""
        return {
            "checkpoint": self.checkpoint,
            "cwd": self.cwd,
            "template": list(self.template),
            "name": self.name,
            "observe": self.observe,
            "split_step": self.split_step,
            "total_step": self.total_step,
        }

    @classmethod
    def from_spec(cls, spec: str) -> CommandCase:
        return cls(**json.loads(spec.removeprefix(COMMAND_CASE_PREFIX)))

    def describe(self) -> str:
        """The report's `case`: the template as a shell would show it (no machine paths)."""
        return shlex.join(self.template)

    def command_interpreter(self, *, search_path: str | None, directory: Path) -> str:
        """The report's `command_interpreter`: what the first word runs, and why.

        `search_path` is the children's PATH, `directory` the check's cwd.
        """
        # `{cwd}/venv/bin/python` names the same program in every phase; `{run_dir}/…` does not.
        placeholders = {name: "{" + name + "}" for name in COMMAND_FIELDS}
        first_word = fill(self.template[0], {**placeholders, "cwd": str(directory)})
        return interpreter_description(first_word, search_path=search_path, directory=directory)

    def command_cwd(self) -> str:
        """The report's `command_cwd`: where each phase runs, and what is resolved from where."""
        if self.cwd == _RUN_DIR:
            return (
                "{run_dir}: each phase in its own run directory; the program and the Python "
                "script resolved from the check's cwd, which is first on PYTHONPATH"
            )
        return "{cwd}: the check's cwd"


def resumes_by_itself(case: object) -> bool:
    """Whether `case` is a CommandCase whose job resumes by itself (no {resume_from?}).

    Its resumed phases get `resume_from` None and the staged checkpoint at
    their own checkpoint path; every phase starts with nothing left at that
    path, since whatever is there is what the job resumes from.
    """
    return isinstance(case, CommandCase) and case.resumes_by_itself


def clear_checkpoint(case: object, run_dir: Path) -> None:
    """Remove what a self-resuming CommandCase's job would find at its checkpoint path in
    `run_dir` (a kept work_dir's last check); nothing for any other case.

    Only a CommandCase's path is sure to lie inside the run directory
    (`_check_checkpoint`), so nothing outside it is ever removed.
    """
    if not isinstance(case, CommandCase) or not case.resumes_by_itself:
        return
    path = case.checkpoint_path(run_dir)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


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


def command_report_fields(
    case: object, environment: Mapping[str, str], directory: Path
) -> dict[str, str]:
    """A command case's `command_interpreter`, `command_cwd` and `command_case` report keys ({}
    for a case class).

    `environment` is the children's, whose PATH a bare first word is looked up in.
    """
    if not isinstance(case, CommandCase):
        return {}
    return {
        "command_interpreter": case.command_interpreter(
            search_path=environment.get("PATH"), directory=directory
        ),
        "command_cwd": case.command_cwd(),
        "command_case": case.fields(),
    }


def observe_default(path: Path) -> dict[str, Any]:
    """A checkpoint directory through load_checkpoint_directory (DCP, a ZeRO directory
    with its `latest` file, or a directory of `.safetensors` files), a `.safetensors`
    file through load_safetensors, else a `torch.load`'d dict (weights only).

    A file in torch's zip format, a safetensors file and a DCP directory's
    shard files are memory-mapped, not read: their tensors stay in the files,
    so the snapshot can refer to them instead of copying them.
    """
    import zipfile

    import torch

    if path.is_dir():
        from trainparity._internal.checkpoints.directories import load_checkpoint_directory

        return load_checkpoint_directory(path, mmap=True)
    if path.name.endswith(".safetensors"):
        from trainparity._internal.checkpoints.safetensors_files import load_safetensors

        return load_safetensors(path)
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
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
