"""The check's side of one warm server: start it, send it fork requests, adopt what it forks.

A server (server.py) is spawned by the C core with room in its argument and
environment strings, so that each child it forks can show its own command and
environment in /proc. `WarmServer.fork` sends one JSON request per child and
reads the replies, with this process a child subreaper meanwhile, so the forked
child becomes this process's own child, waited for like any other.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import secrets
import select
import shutil
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.native.core import core
from trainparity._internal.processes.group import ChildLaunchError, ChildSpec

__all__ = [
    "TEMPORARY_VARIABLE",
    "ServerFailure",
    "WarmServer",
    "kill_and_reap",
    "shows_environment",
]

_SERVER_SCRIPT = Path(__file__).with_name("server.py")
# Each check's torchrun phases have their own TMPDIR (distributed/phases.py). A server has its
# own instead (beside its log), and a child takes its temporary directory, and what the
# server's imports made there, from its own TMPDIR (child.py): so TMPDIR is no server's key.
TEMPORARY_VARIABLE = "TMPDIR"
# Room for a child's command and environment in /proc/PID/cmdline and environ: the kernel shows
# the strings the server was exec'd with, and a child writes its own over them (child.py).
# An argument and a variable of these sizes make that room; the server drops both.
_ROOM_VARIABLE = "TRAINPARITY_WARM_ROOM"
_ENVIRONMENT_ROOM = f"{_ROOM_VARIABLE}={'.' * 16384}"
_ARGUMENT_ROOM = " " * 8192  # last, and blank: ps shows the server's command as it is
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_CONNECT_SECONDS = 30.0
_READY_SECONDS = 120.0  # for a server's import of torch (and what it preloads) and each fork
_ADOPTION_SECONDS = 5.0  # a killed child's middle exits at once: this is never reached


def _packed_size(strings: list[str]) -> int:
    return sum(len(os.fsencode(string)) + 1 for string in strings)


def _server_name() -> str:
    return f"trainparity-warm-{secrets.token_hex(16)}"


def _server_argv(name: str, preload: tuple[str, ...]) -> list[str]:
    return [sys.executable, str(_SERVER_SCRIPT), name, *preload, _ARGUMENT_ROOM]


def shows_environment(
    argv: tuple[str, ...] | list[str],
    environment: Mapping[str, str],
    server_variables: list[tuple[str, str]],
    preload: tuple[str, ...],
) -> bool:
    """Whether a child forked with `argv` and `environment` shows both in /proc as they are.

    The command must fit the server's argument strings (a longer one runs on
    into the environment strings) and the environment the server's
    environment strings, room variable included.
    """
    argument_room = _packed_size(_server_argv(_server_name(), preload))  # names: one length
    environment_room = _packed_size(
        [*(f"{name}={value}" for name, value in server_variables), _ENVIRONMENT_ROOM]
    )
    variables = _packed_size([f"{name}={value}" for name, value in environment.items()])
    return _packed_size(list(argv)) <= argument_room and variables <= environment_room


class ServerFailure(Exception):
    """The server could not fork a child (it died, or broke the protocol): start fresh instead."""


class WarmServer:
    """One warm server process and the connection to it."""

    def __init__(
        self,
        environment: dict[str, str],
        preload: tuple[str, ...],
        log_dir: Path,
        index: int,
        start_in: Callable[[Callable[[], int]], int] | None = None,
    ) -> None:
        """`start_in` runs the spawn elsewhere (the shared servers' own thread), else here."""
        self.name = _server_name()
        self.stderr_path = log_dir / f"warm_server_{index}.stderr.log"
        # Where the server's imports put their temporary files (torch._dynamo makes its
        # compile cache directory there): removed with the server.
        self.temporary = log_dir / f"warm_server_{index}.tmp"
        self.pid = 0
        environment = {**environment, TEMPORARY_VARIABLE: str(self.temporary)}
        try:
            self.temporary.mkdir(parents=True, exist_ok=True)
            # Its cwd is its log directory: a phase's own cwd may not exist (a launch failure
            # reported for that phase), and every child changes to its own anyway.
            spawn = functools.partial(
                core.spawn,
                _server_argv(self.name, preload),
                cwd=str(log_dir),
                env=[*(f"{key}={value}" for key, value in environment.items()), _ENVIRONMENT_ROOM],
                stdout_path=str(log_dir / f"warm_server_{index}.stdout.log"),
                stderr_path=str(self.stderr_path),
            )
            self.pid = start_in(spawn) if start_in is not None else spawn()
        except OSError as error:
            shutil.rmtree(self.temporary, ignore_errors=True)
            raise ServerFailure(f"it could not start: {error}") from None
        self.connection: socket.socket | None = None
        self.path_lookups: dict[str, Any] = {}  # from the server's greeting (lookups())
        self.buffer = b""
        self.reaped = False

    def fork(
        self,
        spec: ChildSpec,
        environment: dict[str, str],
        timeout: float,
        *,
        warm_ranks: bool,
        launcher: dict | None = None,
        trace_filter: bytes | None = None,
    ) -> int:
        """Fork `spec` with `environment`; its pid. ServerFailure: start it fresh instead.

        With `trace_filter` the child waits for a tracer (trace_pid) before it runs;
        `launcher` (torchrun_argv.forked_launcher's) says what a launcher forks warm.
        """
        request = {
            "argv": list(spec.argv),
            "cwd": str(spec.cwd),
            "env": environment,
            "stdout": os.path.abspath(spec.stdout_path),
            "stderr": os.path.abspath(spec.stderr_path),
            "warm_ranks": warm_ranks,
            "launcher": launcher,
        }
        if trace_filter is not None:
            request["trace_filter"] = trace_filter.hex()
        # The server's import and the fork are not a phase's time (its clock starts once its
        # child exists): they may take up to _READY_SECONDS even when its timeout is shorter.
        deadline = time.monotonic() + max(timeout, _READY_SECONDS)
        connection = self._connected(deadline)
        forked = 0
        with _adopting():
            try:
                connection.sendall((json.dumps(request) + "\n").encode())
                reply = self._reply(deadline)
                if "forked" in reply:  # the child exists: its setup's outcome follows
                    forked = int(reply["forked"])
                    reply = self._reply(deadline)
            except BaseException:
                # An interrupted request (Ctrl-C, no reply in time): no half-made child may
                # outlive it, nor run its phase beside the fresh start that replaces it.
                self.close()
                if forked:
                    kill_and_reap(forked)
                raise
        if "pid" not in reply:
            raise ServerFailure(str(reply.get("error", "no pid in the reply")))
        pid = int(reply["pid"])
        failure = reply.get("failure")
        if failure is not None:
            _reap(pid)
            error = OSError(failure["errno"], os.strerror(failure["errno"]), failure["filename"])
            raise ChildLaunchError(spec.name, failure["step"], error)
        return pid

    def alive(self) -> bool:
        """Whether the server still runs; one found dead is reaped (and then needs no kill)."""
        if not self.pid:
            return False
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                return True
        self.reaped = True
        return False

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        if self.pid:
            if not self.reaped:  # a reaped pid (or group) may be someone else's by now
                core.kill_group(self.pid, signal.SIGKILL)
                _reap(self.pid)
            self.pid = 0
        shutil.rmtree(self.temporary, ignore_errors=True)

    def _connected(self, deadline: float) -> socket.socket:
        if self.connection is not None:
            return self.connection
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        limit = min(deadline, time.monotonic() + _CONNECT_SECONDS)
        while True:
            try:
                connection.connect("\0" + self.name)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if not self.alive() or time.monotonic() > limit:
                    connection.close()
                    raise ServerFailure(self._died()) from None
                time.sleep(0.005)
        if _peer_pid(connection) != self.pid:  # someone else's socket of that name
            connection.close()
            raise ServerFailure("another process answered on the server's socket")
        self.connection = connection
        try:
            ready = self._reply(deadline, ready=True)  # torch imported (seconds)
        except BaseException:
            self.close()
            raise
        greeting, _, lookups = ready.partition(" ")
        if greeting != "ready":
            raise ServerFailure(f"unexpected greeting {ready!r}")
        self.path_lookups = json.loads(lookups)
        return connection

    def lookups(self, timeout: float) -> dict[str, Any]:
        """What the server's imports looked up on sys.path (path_lookups.py); waits for them
        to end, as a first fork would. ServerFailure if the server died first."""
        self._connected(time.monotonic() + max(timeout, _READY_SECONDS))
        return self.path_lookups

    def _reply(self, deadline: float, *, ready: bool = False) -> Any:
        assert self.connection is not None
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServerFailure("no reply within the timeout")
            readable, _, _ = select.select([self.connection], [], [], min(remaining, 1.0))
            if not readable:
                continue
            try:
                chunk = self.connection.recv(65536)
            except ConnectionResetError:  # it exited with our connection still in its backlog
                chunk = b""
            if not chunk:
                raise ServerFailure(self._died())
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode() if ready else json.loads(line)

    def _died(self) -> str:
        try:
            lines = self.stderr_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            lines = []
        return "it exited" + (f": {lines[-1]}" if lines else "")


def _peer_pid(connection: socket.socket) -> int:
    credentials = connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
    )
    return struct.unpack("3i", credentials)[0]


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def kill_and_reap(pid: int) -> None:
    """Kill a forked child whose request failed (or that its tracer could not seize), and
    reap it once it is this process's.

    Until its middle process exits it is the middle's child; then it is adopted
    (the request's subreaper window is still open), dead or alive.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + _ADOPTION_SECONDS
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG) != (0, 0):
                return  # reaped
        except ChildProcessError:  # not adopted yet, or gone
            if not os.path.exists(f"/proc/{pid}"):
                return
        time.sleep(0.005)


_subreaper_lock = threading.Lock()
_subreaper_users = 0
_subreaper_was_set = False


@contextlib.contextmanager
def _adopting() -> Iterator[None]:
    """This process as a child subreaper while a request runs, so it adopts the forked child.

    Only for the request (milliseconds): a descendant orphaned meanwhile is
    adopted too, and is reaped by nothing of ours. Left set when it already was.
    """
    global _subreaper_users, _subreaper_was_set
    libc = ctypes.CDLL(None, use_errno=True)
    with _subreaper_lock:
        if _subreaper_users == 0:
            current = ctypes.c_int(0)
            libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(current), 0, 0, 0)
            _subreaper_was_set = bool(current.value)
            if not _subreaper_was_set and libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
                raise ServerFailure("this process cannot adopt the forked child (prctl)")
        _subreaper_users += 1
    try:
        yield
    finally:
        with _subreaper_lock:
            _subreaper_users -= 1
            if _subreaper_users == 0 and not _subreaper_was_set:
                libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
