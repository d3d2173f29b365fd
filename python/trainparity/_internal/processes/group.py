"""Runs child processes together, each in its own process group, with timeouts and kill escalation.

Built on the native core's spawn/wait/kill_group. A child gets exactly the
environment and working directory of its ChildSpec, stdin from /dev/null,
stdout/stderr written to files (never pipes, so a chatty child cannot
deadlock), no other inherited descriptor, and SIGKILL as its parent-death
signal. Its process group (pgid == pid) is the unit of killing: on timeout the
group gets SIGTERM, then SIGKILL after a grace period; when the child exits its
group is SIGKILLed at once, so descendants it left behind (launchers, data
loader workers, anything ignoring SIGTERM) never outlive it. If anything
interrupts the wait (Ctrl-C included, and SIGTERM/SIGHUP during a check:
see termination.py) every running child's group is terminated and reaped
before the exception propagates.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from trainparity._internal.native.core import core
from trainparity._internal.processes.termination import TerminatedBySignal

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "ChildGroup",
    "ChildLaunchError",
    "ChildResult",
    "ChildSpec",
    "EventCallback",
    "EventKind",
    "Launcher",
    "run_children",
    "spawn_child",
]

DEFAULT_GRACE_SECONDS = 3.0
"""Time between SIGTERM and SIGKILL for a child that exceeded its timeout."""

# Cleanup after an exception is bounded more tightly than a timeout's grace:
# the user pressed Ctrl-C and is waiting for the prompt.
_CLEANUP_GRACE_SECONDS = 1.0

EventKind = Literal["start", "end"]


def _require_path(value: object, what: str) -> Path:
    if isinstance(value, bytes) or not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{what} must be a str or os.PathLike path, not {type(value).__name__}")
    path = Path(value)
    if "\0" in str(path):
        raise ValueError(f"{what} contains a NUL character")
    return path


@dataclass(frozen=True)
class ChildSpec:
    """One child to run: its argv, working directory, complete environment and output files.

    Validated and normalised on construction: argv becomes a tuple, the paths
    become Path objects, env a read-only copy. env is the child's whole
    environment; nothing of the caller's is merged in (pass
    ``{**os.environ, ...}`` to inherit). A bare argv[0] is looked up in env's
    PATH ('/bin:/usr/bin' when env has none); a relative argv[0] with a slash
    is resolved against cwd. stdout_path and stderr_path are created or
    truncated by the child (their directories must exist); relative ones are
    relative to the caller's working directory, not cwd.
    """

    name: str
    argv: Sequence[str]
    cwd: str | os.PathLike[str]
    env: Mapping[str, str] = field(hash=False)
    stdout_path: str | os.PathLike[str]
    stderr_path: str | os.PathLike[str]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"child name must be a non-empty str, not {self.name!r}")
        if isinstance(self.argv, (str, bytes)) or not isinstance(self.argv, Sequence):
            raise TypeError(
                f"child {self.name!r}: argv must be a sequence of str such as "
                f"['python', 'train.py'], not {type(self.argv).__name__}"
            )
        if not self.argv:
            raise ValueError(f"child {self.name!r}: argv must not be empty")
        for index, argument in enumerate(self.argv):
            if not isinstance(argument, str):
                raise TypeError(
                    f"child {self.name!r}: argv[{index}] must be str, not {type(argument).__name__}"
                )
            if "\0" in argument:
                raise ValueError(f"child {self.name!r}: argv[{index}] contains a NUL character")
        if not self.argv[0]:
            raise ValueError(f"child {self.name!r}: argv[0], the program, must not be empty")
        if not isinstance(self.env, Mapping):
            raise TypeError(
                f"child {self.name!r}: env must be a mapping of str to str, "
                f"not {type(self.env).__name__}"
            )
        for key, value in self.env.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(
                    f"child {self.name!r}: env entries must be str to str, got {key!r}: "
                    f"{type(value).__name__}"
                )
            if not key or "=" in key or "\0" in key:
                raise ValueError(
                    f"child {self.name!r}: env key {key!r} is not a valid variable name "
                    "(non-empty, without '=' or NUL)"
                )
            if "\0" in value:
                raise ValueError(
                    f"child {self.name!r}: env value of {key!r} contains a NUL character"
                )
        object.__setattr__(self, "argv", tuple(self.argv))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "cwd", _require_path(self.cwd, f"child {self.name!r}: cwd"))
        for attribute in ("stdout_path", "stderr_path"):
            path = _require_path(getattr(self, attribute), f"child {self.name!r}: {attribute}")
            object.__setattr__(self, attribute, path)


@dataclass(frozen=True)
class ChildResult:
    """How one child ended and what it used.

    exit_code is its exit status, or None if a signal killed it (then signal
    is that signal's number). timed_out is True when it ran past the timeout
    and was sent SIGTERM (and SIGKILL after the grace period if still
    running); exit_code/signal then say how it actually ended. CPU seconds and
    peak RSS (bytes) come from wait4 and include descendants the child itself
    reaped; wall_seconds runs from just before launch to the reap.
    """

    name: str
    pid: int
    exit_code: int | None
    signal: int | None
    timed_out: bool
    wall_seconds: float
    user_seconds: float
    sys_seconds: float
    peak_rss_bytes: int
    # A phase run by a scheduler (processes/executor.py): its job, and the state the
    # scheduler gave it at the end (COMPLETED, TIMEOUT, PREEMPTED, ...). None: a local child.
    job_id: str | None = None
    job_state: str | None = None

    @property
    def succeeded(self) -> bool:
        """Exited with status 0 within the timeout."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def returncode(self) -> int:
        """The exit status, or minus the signal that killed it (subprocess's convention)."""
        return self.exit_code if self.exit_code is not None else -(self.signal or 0)


Launcher = Callable[["ChildSpec"], int]
"""Starts a child now and returns its pid; raises ChildLaunchError when it cannot."""

EventCallback = Callable[[str, EventKind, ChildResult | None], None]
"""on_event(name, "start", None) after a launch; on_event(name, "end", result) after a reap."""


class ChildLaunchError(OSError):
    """A child could not be started; errno, filename and the message say why.

    child_name is the ChildSpec's name; step is where the launch failed:
    'exec' (program missing or not executable), 'chdir' (bad cwd), 'stdout' or
    'stderr' (output file could not be created), or a lower-level step
    ('setpgid', 'pdeathsig', 'signals', 'stdin', 'close_fds', 'pipe', 'fork',
    'read').
    """

    def __init__(self, child_name: str, step: str, cause: OSError) -> None:
        super().__init__(cause.errno, f"child {child_name!r}: {cause.strerror}", cause.filename)
        self.child_name = child_name
        self.step = step


class _RunningChild:
    """Book-keeping for one launched, not yet reaped child."""

    def __init__(self, spec: ChildSpec, pid: int, started: float, timeout: float) -> None:
        self.spec = spec
        self.pid = pid
        self.started = started
        self.deadline = started + timeout
        self.terminated_at: float | None = None
        self.killed = False

    def next_action_at(self, grace: float) -> float:
        """When this child next needs a signal from us; inf once SIGKILL is sent."""
        if self.terminated_at is None:
            return self.deadline
        if not self.killed:
            return self.terminated_at + grace
        return math.inf


def spawn_child(spec: ChildSpec) -> int:
    """Start `spec` as a fresh interpreter (fork + exec by the C core); its pid."""
    try:
        return core.spawn(
            list(spec.argv),
            cwd=spec.cwd,
            env=[f"{key}={value}" for key, value in spec.env.items()],
            stdout_path=spec.stdout_path,
            stderr_path=spec.stderr_path,
        )
    except OSError as error:
        raise ChildLaunchError(spec.name, getattr(error, "step", "spawn"), error) from error


def _enforce_timeouts(running: Mapping[int, _RunningChild], grace: float) -> None:
    now = time.monotonic()
    for child in running.values():
        if child.terminated_at is None and now >= child.deadline:
            core.kill_group(child.pid, signal.SIGTERM)
            child.terminated_at = now
        elif child.terminated_at is not None and not child.killed:
            if now >= child.terminated_at + grace:
                core.kill_group(child.pid, signal.SIGKILL)
                child.killed = True


def _reap(running: dict[int, _RunningChild], timeout: float | None) -> list[ChildResult]:
    """Wait up to `timeout` for any running child to exit; reap and describe those that did."""
    records = core.wait(list(running), timeout, kill_group_on_exit=True)
    ended = time.monotonic()
    finished = []
    for record in records:
        child = running.pop(record.pid)
        finished.append(
            ChildResult(
                name=child.spec.name,
                pid=record.pid,
                exit_code=record.exit_code,
                signal=record.signal,
                timed_out=child.terminated_at is not None,
                wall_seconds=ended - child.started,
                user_seconds=record.user_seconds,
                sys_seconds=record.sys_seconds,
                peak_rss_bytes=record.peak_rss_bytes,
            )
        )
    return finished


def _terminate_all(running: dict[int, _RunningChild], grace: float) -> None:
    """SIGTERM every running child's group, SIGKILL what is left after grace, reap all."""
    for pid in running:
        core.kill_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    try:
        while running and (remaining := deadline - time.monotonic()) > 0:
            for record in core.wait(list(running), remaining, kill_group_on_exit=True):
                running.pop(record.pid)
    except (KeyboardInterrupt, TerminatedBySignal):
        pass  # another Ctrl-C (or a first SIGTERM) only cuts the grace period short
    for pid in running:
        core.kill_group(pid, signal.SIGKILL)
    while running:
        try:
            records = core.wait(list(running), None, kill_group_on_exit=True)
        except (KeyboardInterrupt, TerminatedBySignal):
            # SIGKILLed children die at once; reap them all before the
            # original exception propagates, or they would be left as zombies.
            continue
        for record in records:
            running.pop(record.pid)


def run_children(
    specs: Sequence[ChildSpec],
    *,
    timeout: float,
    grace: float = DEFAULT_GRACE_SECONDS,
    on_event: EventCallback | None = None,
) -> list[ChildResult]:
    """Run all specs at once, wait for every one, and return their results in spec order.

    The caller chooses the concurrency by how many specs it passes. Each child
    has its own timeout (seconds from its launch): past it, its process group
    gets SIGTERM, and SIGKILL ``grace`` seconds later if the child is still
    running; its result then has ``timed_out`` set. Whenever a child exits, its
    group is SIGKILLed before the child is reaped, so no descendant survives
    it.

    on_event(name, "start", None) is called after each launch and
    on_event(name, "end", result) after each reap; use it for progress.

    A launch failure raises ChildLaunchError (after the children already
    started are terminated and reaped); the caller turns it into an ERROR
    result. Any exception while waiting (KeyboardInterrupt, or one raised by
    on_event) terminates every running child's group (SIGTERM, at most
    min(grace, 1 s), SIGKILL), reaps them, and propagates.

    Call it from a thread that outlives the children (it blocks until they are
    reaped, so any thread does): Linux sends the parent-death signal when the
    launching thread exits.
    """
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, not {type(timeout).__name__}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive, finite number of seconds, not {timeout!r}")
    if isinstance(grace, bool) or not isinstance(grace, (int, float)):
        raise TypeError(f"grace must be a number of seconds, not {type(grace).__name__}")
    if not (math.isfinite(grace) and grace >= 0):
        raise ValueError(f"grace must be a finite number of seconds >= 0, not {grace!r}")
    names: set[str] = set()
    for spec in specs:
        if not isinstance(spec, ChildSpec):
            raise TypeError(f"specs must hold ChildSpec objects, not {type(spec).__name__}")
        if spec.name in names:
            raise ValueError(f"child name {spec.name!r} is used twice; give each child its own")
        names.add(spec.name)

    with ChildGroup(grace=grace, on_event=on_event) as group:
        for spec in specs:
            group.start(spec, timeout=timeout)
        while group.running_names():
            group.wait(None)
        return [group.result(spec.name) for spec in specs]  # type: ignore[misc]


class ChildGroup:
    """Children started one at a time and waited on together; closing it leaves none behind.

    Use as a context manager: on exit (normal or by any exception,
    KeyboardInterrupt included) every child still running gets SIGTERM to its
    group, at most min(grace, 1 s), then SIGKILL, and is reaped. Timeouts
    are per child, counted from its launch (None: no timeout); they are
    enforced while the group is being waited on.
    """

    def __init__(
        self,
        *,
        grace: float = DEFAULT_GRACE_SECONDS,
        on_event: EventCallback | None = None,
        launcher: Launcher = spawn_child,
    ) -> None:
        """`launcher` starts one child and returns its pid, a child of this process
        (spawn_child: a fresh interpreter; a warm ChildStarter: forked from its server)."""
        self.grace = grace
        self.on_event = on_event
        self.launcher = launcher
        self._running: dict[int, _RunningChild] = {}
        self._results: dict[str, ChildResult] = {}
        self._names: set[str] = set()

    def __enter__(self) -> ChildGroup:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self, spec: ChildSpec, *, timeout: float | None) -> int:
        """Launch `spec` now; raises ChildLaunchError when it cannot start."""
        if spec.name in self._names:
            raise ValueError(f"child name {spec.name!r} is used twice; give each child its own")
        pid = self.launcher(spec)
        # From the moment the child exists: a warm launcher may first wait for its server's
        # import, which is not the child's time (nor counted against its timeout).
        started = time.monotonic()
        self._names.add(spec.name)
        self._running[pid] = _RunningChild(
            spec, pid, started, math.inf if timeout is None else timeout
        )
        if self.on_event is not None:
            self.on_event(spec.name, "start", None)
        return pid

    def wait(self, timeout: float | None) -> list[ChildResult]:
        """Wait until at least one child has been reaped or `timeout` seconds passed."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while self._running:
            _enforce_timeouts(self._running, self.grace)
            next_action = min(child.next_action_at(self.grace) for child in self._running.values())
            until = min(deadline, next_action)
            remaining = None if until == math.inf else max(0.0, until - time.monotonic())
            finished = _reap(self._running, remaining)
            # Every reaped child is recorded before any callback runs, so an
            # exception from a callback leaves only live children for close().
            for result in finished:
                self._results[result.name] = result
            if self.on_event is not None:
                for result in finished:
                    self.on_event(result.name, "end", result)
            if finished or time.monotonic() >= deadline:
                return finished
        return []

    def wait_for(self, name: str, timeout: float | None = None) -> ChildResult | None:
        """Wait (serving every child's events) until child `name` has been reaped, or timeout."""
        deadline = math.inf if timeout is None else time.monotonic() + timeout
        while self.is_running(name):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self.wait(None if remaining == math.inf else remaining)
        return self._results.get(name)

    def is_running(self, name: str) -> bool:
        return any(child.spec.name == name for child in self._running.values())

    def running_names(self) -> list[str]:
        return [child.spec.name for child in self._running.values()]

    def result(self, name: str) -> ChildResult | None:
        """How child `name` ended, once reaped."""
        return self._results.get(name)

    def terminate(self, name: str) -> None:
        """Stop one child now: SIGTERM to its group, grace, SIGKILL; reap it."""
        for pid, child in list(self._running.items()):
            if child.spec.name == name:
                one = {pid: self._running.pop(pid)}
                _terminate_all(one, min(self.grace, _CLEANUP_GRACE_SECONDS))

    def close(self) -> None:
        """Terminate and reap every child still running."""
        _terminate_all(self._running, min(self.grace, _CLEANUP_GRACE_SECONDS))
