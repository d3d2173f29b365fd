"""Check commands of a module fixture run a few at a time, their output in files.

A check already runs its phases side by side, each phase several ranks:
starting every command of a module at once would put dozens of processes
on the suite's two cores and starve the other xdist worker's tests.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

Command = list[str] | Callable[[], list[str]]


def run_a_few_at_a_time(
    commands: Mapping[str, Command],
    *,
    cwd: Path,
    env: Mapping[str, str],
    at_once: int = 2,
    limit_s: float = 1800,
    after: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, tuple[int, str, str]]:
    """Each command's (returncode, stdout, stderr), at most `at_once` running at a time.

    Commands start in order, except that one named in `after` (name to the names
    of other commands) waits until those have ended: the next ready command
    starts in its place. A callable command is built when it starts (a free port
    taken then, not minutes before; what the command it waited for left, read then).
    Output goes to files under cwd's parent's `output/NAME`, so a command that
    writes much never waits on a pipe nobody reads.
    """
    after = dict(after or {})
    unknown = {name: firsts for name, firsts in after.items() if set(firsts) - set(commands)}
    assert not unknown, f"commands waiting for commands that do not exist: {unknown}"
    waiting = list(commands.items())
    running: dict[str, tuple[subprocess.Popen, Path]] = {}
    done: dict[str, tuple[int, str, str]] = {}
    deadline = time.monotonic() + limit_s
    try:
        while waiting or running:
            ready = [item for item in waiting if set(after.get(item[0], ())) <= set(done)]
            while ready and len(running) < at_once:
                name, command = ready.pop(0)
                waiting.remove((name, command))
                argv = command() if callable(command) else command
                output = cwd.parent / "output" / name
                output.mkdir(parents=True)
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
    return done


def report_of(runs: Mapping[str, tuple[int, str, str]], name: str) -> dict:
    """The JSON report command `name` printed (`--json`), or a failure showing its stderr."""
    returncode, stdout, stderr = runs[name]
    assert stdout, f"{name} exited {returncode} with no report: {stderr[-3000:]}"
    return json.loads(stdout)


def differences_by_path(report: dict) -> dict[str, dict]:
    return {difference["path"]: difference for difference in report["all_differences"]}
