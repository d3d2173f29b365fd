"""Check commands of a module fixture run a few at a time, their output in files.

A check already runs its phases side by side, each phase several ranks:
starting every command of a module at once would put dozens of processes
on the suite's two cores and starve the other xdist worker's tests.

`warm=True` is for plain jobs a test only needs the output of (a checkpoint, a
recording), not how they start: each is forked from this worker's warm servers,
as a warm check forks its phases (a torchrun agent's ranks from its zygote), so
it does not import torch (and the module's preloads) again. A check's own phases
are never started this way. `here=True` runs the checks given as `python -m
trainparity …` commands in this process (tests/cli_here.py), with this worker's warm
servers: no interpreter that imports the case, and no servers of their own.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from tests.cli_here import cli_here, runs_here

Command = list[str] | Callable[[], list[str]]


def run_a_few_at_a_time(
    commands: Mapping[str, Command],
    *,
    cwd: Path,
    env: Mapping[str, str],
    at_once: int = 2,
    limit_s: float = 1800,
    after: Mapping[str, Sequence[str]] | None = None,
    warm: bool = False,
    here: bool | Collection[str] = False,
) -> dict[str, tuple[int, str, str]]:
    """Each command's (returncode, stdout, stderr), at most `at_once` running at a time.

    Commands start in order, except that one named in `after` (name to the names
    of other commands) waits until those have ended: the next ready command
    starts in its place. A callable command is built when it starts (a free port
    taken then, not minutes before; what the command it waited for left, read then).
    Output goes to files under cwd's parent's `output/NAME`, so a command that
    writes much never waits on a pipe nobody reads. `warm`: see the module's docstring.
    `here`: each `python -m trainparity …` command (or those of them named, if a
    collection) runs in this process when it starts (tests/cli_here.py), one at a time,
    while the commands already started run on beside it.
    """
    after = dict(after or {})
    unknown = {name: firsts for name, firsts in after.items() if set(firsts) - set(commands)}
    assert not unknown, f"commands waiting for commands that do not exist: {unknown}"
    waiting = list(commands.items())
    running: dict[str, tuple[subprocess.Popen | _WarmJob, Path]] = {}
    done: dict[str, tuple[int, str, str]] = {}
    deadline = time.monotonic() + limit_s
    in_process = set(commands) if here is True else set(here or ())
    starter = _warm_starter(cwd.parent / "output" / "servers", limit_s) if warm else None
    try:
        while waiting or running:
            ready = [item for item in waiting if set(after.get(item[0], ())) <= set(done)]
            while ready and len(running) < at_once:
                name, command = ready.pop(0)
                waiting.remove((name, command))
                argv = command() if callable(command) else command
                if name in in_process and runs_here(argv):
                    done[name] = cli_here(argv, cwd=cwd, environment=env)
                    continue
                output = cwd.parent / "output" / name
                output.mkdir(parents=True)
                if starter is not None:
                    running[name] = (_WarmJob(starter, name, argv, cwd, env, output), output)
                    continue
                with (output / "stdout").open("w") as stdout, (output / "stderr").open("w") as err:
                    process = subprocess.Popen(
                        argv, cwd=cwd, env=dict(env), stdout=stdout, stderr=err
                    )
                running[name] = (process, output)
            for name, (process, output) in list(running.items()):
                if process.poll() is not None:
                    del running[name]
                    texts = [(output / part).read_text() for part in ("stdout", "stderr")]
                    done[name] = (process.returncode, *texts)
            assert time.monotonic() < deadline, (
                f"still running after {limit_s:.0f} s: {sorted(running)}"
            )
            time.sleep(0.2)
    finally:
        # On a timeout the others stop too: a check and torchrun end their ranks on SIGTERM.
        for process, _ in running.values():
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=60)
        if starter is not None:
            starter.close()
    return done


def _warm_starter(log_dir: Path, timeout: float):
    """The starter a warm check makes, borrowing this worker's shared servers (conftest.py)."""
    from trainparity._internal.processes.warm.pool import current_shared_servers
    from trainparity._internal.processes.warm.starter import ChildStarter

    log_dir.mkdir(parents=True, exist_ok=True)
    return ChildStarter("warm", log_dir=log_dir, timeout=timeout, shared=current_shared_servers())


class _WarmJob:
    """One command forked from a warm server (or spawned, where it cannot be): a Popen's
    poll, terminate and wait. It leads its own process group, as a check's child does."""

    def __init__(self, starter, name: str, argv: list[str], cwd: Path, env, output: Path):
        from trainparity._internal.processes.group import ChildSpec

        spec = ChildSpec(name, argv, cwd, dict(env), output / "stdout", output / "stderr")
        self.pid = starter.launch(spec)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except ProcessLookupError:  # its group is gone: only the reaping is left
            pass

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                os.killpg(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise TimeoutError(f"job {self.pid} still running after SIGTERM and {timeout} s")
            time.sleep(0.05)
        return self.returncode


def report_of(runs: Mapping[str, tuple[int, str, str]], name: str) -> dict:
    """The JSON report command `name` printed (`--json`), or a failure showing its stderr."""
    returncode, stdout, stderr = runs[name]
    assert stdout, f"{name} exited {returncode} with no report: {stderr[-3000:]}"
    return json.loads(stdout)


def differences_by_path(report: dict) -> dict[str, dict]:
    return {difference["path"]: difference for difference in report["all_differences"]}


@contextlib.contextmanager
def beside_the_module(
    request, test_name: str, call: Callable, /, *args, **kwargs
) -> Iterator[Future | None]:
    """`call(*args, **kwargs)` started in a thread now, for the module's test `test_name`.

    For a check that spends most of its time waiting out a timeout (a hanging rank's):
    a module fixture starts it with the module's first test, the module's other tests run
    while it waits, and `test_name` (last in the file) joins the future. None, and nothing
    started, when `test_name` is not selected; the block's end waits for the call.
    """
    selected = any(
        item.name == test_name and getattr(item, "module", None) is request.module
        for item in request.session.items
    )
    if not selected:
        yield None
        return
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor.submit(call, *args, **kwargs)
