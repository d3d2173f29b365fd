"""docs/examples/notebook.ipynb, executed cell by cell in a real Jupyter kernel (nbclient, ipykernel).

The kernel is this interpreter (a kernel spec written into the test's own
JUPYTER_PATH, nothing installed into the user's home). The notebook checks
its own verdicts with asserts (a failing cell fails the run): a case class
defined in a cell passes check_resume by value, the second warm check
inside `shared_warm_servers()` starts no server, a CommandCase check draws
NotebookProgress's table. Here, from outside the kernel: the interrupt cell
is interrupted (`interrupt_kernel`, as Jupyter's stop button does) once its
phases have started, after which the kernel has no child process left and
the kernel's temporary directory no trainparity directory; the displayed
HTML result renders in headless Chromium with its verdict.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from trainparity._internal.reports.html_views import OUTCOME_COLOURS

from tests.chromium import chromium_binary, pixels_near, render_page
from tests.helpers import descendants

REPOSITORY = Path(__file__).resolve().parent.parent
EXAMPLES = REPOSITORY / "docs" / "examples"
KERNEL_NAME = "trainparity-test-python"
INTERRUPTED_TAG = "interrupted"
# Generous: only a stuck kernel or check reaches it, never a slow machine's normal run.
CELL_TIMEOUT = 300
PHASES_STARTED_TIMEOUT = 120
# Where Jupyter and IPython keep their files: under the test's directory, not the user's home.
JUPYTER_VARIABLES = (
    "JUPYTER_PATH",
    "JUPYTER_CONFIG_DIR",
    "JUPYTER_DATA_DIR",
    "JUPYTER_RUNTIME_DIR",
    "IPYTHONDIR",
)


@dataclass
class NotebookRun:
    """What the test saw of one execution of the notebook."""

    notebook: nbformat.NotebookNode
    kernel_temporary: Path
    children_before_interrupt: set[int] = field(default_factory=set)
    children_while_running: set[int] = field(default_factory=set)
    children_after_interrupt: set[int] = field(default_factory=set)
    leftovers_before_interrupt: list[str] = field(default_factory=list)
    leftovers_while_running: list[str] = field(default_factory=list)
    leftovers_after_interrupt: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def notebook_run(tmp_path_factory) -> NotebookRun:
    root = tmp_path_factory.mktemp("notebook")
    workdir = root / "examples"  # a copy, so nothing the notebook does lands in docs/
    workdir.mkdir()
    for name in ("notebook.ipynb", "tiny_train.py"):
        (workdir / name).write_bytes((EXAMPLES / name).read_bytes())
    kernel_temporary = root / "kernel-tmp"
    kernel_temporary.mkdir()
    notebook = nbformat.read(workdir / "notebook.ipynb", as_version=4)
    run = NotebookRun(notebook, kernel_temporary)
    with pytest.MonkeyPatch.context() as patch:
        environment = _kernel_environment(root, kernel_temporary)
        for name in JUPYTER_VARIABLES:  # this process looks the kernel spec up there too
            patch.setenv(name, environment[name])
        asyncio.run(_execute(run, workdir, environment))
    return run


def _kernel_environment(root: Path, kernel_temporary: Path) -> dict[str, str]:
    """This interpreter as a kernel spec, Jupyter's and IPython's files under `root`."""
    spec_directory = root / "jupyter" / "kernels" / KERNEL_NAME
    spec_directory.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "trainparity test kernel",
        "language": "python",
        "interrupt_mode": "signal",
    }
    (spec_directory / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    jupyter = {name: str(root / name.lower()) for name in JUPYTER_VARIABLES}
    jupyter["JUPYTER_PATH"] = str(root / "jupyter")
    environment = {**os.environ, **jupyter}
    # The notebook's own choices, not the suite's: a plain kernel starts children fresh.
    environment.pop("TRAINPARITY_START", None)
    environment.pop("PYTHONHASHSEED", None)
    environment["TMPDIR"] = str(kernel_temporary)
    environment["OMP_NUM_THREADS"] = "1"  # tiny models, on a machine shared with other tests
    return environment


async def _execute(run: NotebookRun, workdir: Path, environment: dict[str, str]) -> None:
    client = NotebookClient(
        run.notebook,
        kernel_name=KERNEL_NAME,
        timeout=CELL_TIMEOUT,
        startup_timeout=120,
        resources={"metadata": {"path": str(workdir)}},
    )
    async with client.async_setup_kernel(env=environment):
        kernel_pid = client.km.provisioner.pid
        for index, cell in enumerate(run.notebook.cells):
            if INTERRUPTED_TAG not in cell.metadata.get("tags", []):
                await client.async_execute_cell(cell, index)
                continue
            run.children_before_interrupt = descendants(kernel_pid)
            run.leftovers_before_interrupt = _leftovers(run.kernel_temporary)
            running = asyncio.ensure_future(client.async_execute_cell(cell, index))
            await _phases_started(run.kernel_temporary, running)
            run.children_while_running = descendants(kernel_pid)
            run.leftovers_while_running = _leftovers(run.kernel_temporary)
            await client.km.interrupt_kernel()
            await running
            run.children_after_interrupt = descendants(kernel_pid)
            run.leftovers_after_interrupt = _leftovers(run.kernel_temporary)


async def _phases_started(kernel_temporary: Path, running: asyncio.Future) -> None:
    """Until a training phase of the interrupt cell's check has touched its `started` file."""
    deadline = time.monotonic() + PHASES_STARTED_TIMEOUT
    while not any(kernel_temporary.glob("trainparity-*/*/started")):
        if running.done():
            running.result()  # raises what went wrong in the cell
            pytest.fail("the interrupt cell ended before any of its phases started")
        if time.monotonic() > deadline:
            pytest.fail(f"no phase started within {PHASES_STARTED_TIMEOUT} s")
        await asyncio.sleep(0.1)


def _leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir() if path.name.startswith("trainparity-"))


def _cell(run: NotebookRun, needle: str) -> nbformat.NotebookNode:
    return next(cell for cell in run.notebook.cells if needle in cell.source)


def _text(cell: nbformat.NotebookNode) -> str:
    return "".join(output.get("text", "") for output in cell.outputs)


def test_every_cell_ran_and_a_case_class_from_a_cell_passed_by_value(notebook_run):
    code = [cell for cell in notebook_run.notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code)
    errors = [
        output
        for cell in code
        if INTERRUPTED_TAG not in cell.metadata.get("tags", [])
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []
    assert "<by value> __main__.TinyResume" in _text(_cell(notebook_run, "first = check_resume"))


def test_the_second_warm_check_borrowed_the_servers_of_the_first(notebook_run):
    # The cell asserts it (set(servers.idle_pids) unchanged); here, that it said so.
    printed = _text(_cell(notebook_run, "second = check_resume"))
    assert re.search(
        r"warm servers started: [1-9]\d*; second check [\d.]+ s, warm servers started: 0", printed
    )


def test_notebook_progress_drew_every_phase_of_the_command_case_check(notebook_run):
    cell = _cell(notebook_run, "progress=NotebookProgress()")
    tables = [
        output["data"]["text/html"]
        for output in cell.outputs
        if output.output_type == "display_data" and "text/html" in output.get("data", {})
    ]
    assert len(tables) == 1, "one table, updated in place"
    for phase in ("baseline_a", "baseline_b", "candidate_split", "candidate_resume"):
        assert re.search(rf"<td>{phase}</td>\s*<td>done</td>", tables[0]), phase


def test_an_interrupt_leaves_no_child_and_no_directory_and_the_kernel_carries_on(notebook_run):
    run = notebook_run
    interrupted = next(
        cell for cell in run.notebook.cells if INTERRUPTED_TAG in cell.metadata.get("tags", [])
    )
    assert [output.get("ename") for output in interrupted.outputs] == ["KeyboardInterrupt"]
    # While it ran, the check had children and a run directory; afterwards, neither is left.
    assert run.children_while_running - run.children_before_interrupt
    assert run.leftovers_while_running
    assert run.children_after_interrupt == run.children_before_interrupt
    assert run.leftovers_before_interrupt == []
    assert run.leftovers_after_interrupt == []
    after = _cell(run, "after = check_resume")
    results = [output["data"]["text/plain"] for output in after.outputs if "data" in output]
    assert results == ["<Outcome.PASS: 'PASS'>"]


def test_chromium_renders_the_displayed_result_with_its_verdict(notebook_run, tmp_path):
    chromium = chromium_binary()
    cell = _cell(notebook_run, "first = check_resume")
    fragment = next(
        output["data"]["text/html"]
        for output in cell.outputs
        if output.get("data", {}).get("text/html")
    )
    page = tmp_path / "result.html"
    page.write_text(
        f"<!doctype html><html><head><meta charset='utf-8'></head><body>{fragment}</body></html>",
        encoding="utf-8",
    )
    dom = render_page(chromium, page, tmp_path / "profile", "--dump-dom").stdout
    badge = re.search(r"<span class=\"tp-badge\" id=\"tp-outcome\"[^>]*>([^<]*)</span>", dom)
    assert badge is not None and badge.group(1) == "PASS"
    assert "&lt;by value&gt; __main__.TinyResume" in dom
    screenshot = tmp_path / "result.png"
    render_page(
        chromium, page, tmp_path / "profile", "--window-size=800,240", f"--screenshot={screenshot}"
    )
    assert pixels_near(screenshot.read_bytes(), OUTCOME_COLOURS["PASS"]) > 300
