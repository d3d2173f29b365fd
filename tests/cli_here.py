"""`python -m trainparity …` run in this process, as a process of its own would run it.

A test that runs a check through the command line as a subprocess pays a new
interpreter that imports the case (torch and the libraries it imports) and starts
warm servers of its own. Run here instead, the command uses this worker's warm
servers (tests/conftest.py), which the module's other checks share, and its imports
stay loaded. What it sees is what the subprocess would: its environment (and nothing
else of this process's), its working directory, the case's project first on
sys.path with its modules imported afresh (`project_imports`), and its standard
output and error captured.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

CLI = (sys.executable, "-m", "trainparity")


def runs_here(argv: Sequence[str]) -> bool:
    """Whether `argv` is a `python -m trainparity …` command that cli_here can run."""
    return tuple(argv[: len(CLI)]) == CLI


def cli_here(
    argv: Sequence[str], *, cwd: Path, environment: Mapping[str, str]
) -> tuple[int, str, str]:
    """`argv` (`python -m trainparity …`) run in this process: (exit code, stdout, stderr)."""
    from trainparity._internal.cli.main import main

    assert runs_here(argv), f"not a `python -m trainparity` command: {argv}"
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        for name in set(os.environ) - set(environment):
            patch.delenv(name)
        for name, value in environment.items():
            patch.setenv(name, value)
        patch.chdir(cwd)
        with project_imports(Path(cwd)), contextlib.redirect_stdout(out):
            with contextlib.redirect_stderr(err):
                code = main(list(argv[len(CLI) :]))
    return code, out.getvalue(), err.getvalue()


def completed_here(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """`argv` run here in this process's working directory and environment, as
    `subprocess.run(argv, capture_output=True, text=True)` would return it."""
    code, out, err = cli_here(argv, cwd=Path.cwd(), environment=dict(os.environ))
    return subprocess.CompletedProcess(list(argv), code, out, err)


@contextlib.contextmanager
def project_imports(project: Path) -> Iterator[None]:
    """This worker's imports as a new process in `project` would see them, and back after.

    The CLI puts its directory first on sys.path and the case's module stays imported: in a
    worker that ran other modules, a module of the same name from another project (an
    `hf_cases` of tests/integrations) would be found instead, and this project's would be
    found by the modules after. The project's top-level names are set aside for the block.
    """
    names = {path.stem for path in project.glob("*.py")} | {
        path.name for path in project.iterdir() if (path / "__init__.py").is_file()
    }

    def ours(module: str) -> bool:
        return module.partition(".")[0] in names

    path = list(sys.path)
    aside = {module: sys.modules.pop(module) for module in list(sys.modules) if ours(module)}
    try:
        yield
    finally:
        for module in [module for module in sys.modules if ours(module)]:
            del sys.modules[module]
        sys.modules.update(aside)
        sys.path[:] = path
