"""How a check starts its children: fresh interpreters, or forked from a warm server.

`start="fresh"` (the default) execs a new interpreter per child. `start="warm"`
forks each child whose command is `python script.py …`, `python -m module …`
or `python -c code …` (python being this interpreter, without other options) from
a server that imported torch once (warm_server.py); any other command starts
fresh. `python -m torch.distributed.run` is forked too (its agent then skips
importing torch, and forks its ranks from a zygote unless
TRAINPARITY_WARM_RANKS=0: warm_ranks.py), when its
environment fits where /proc shows a forked child's (warm_main._show_process):
the rank watcher finds the agent's ranks by that environment. A command run through `env
NAME=VALUE …` (how plan_command passes a phase plan) is forked as what env
would exec: the command after the assignments, with them in its environment.
A ChildStarter is the one
seam: ChildGroup calls its `launch` where it would spawn. Servers live as long
as the check (closed with it, and killed by their parent-death signal if the
check dies), or, inside `shared_warm_servers()` (warm_pool.py), are borrowed
from and given back to the process's shared ones; one serves every child of
the same environment. The server of
the accumulation worker also imports torch._dynamo, which each worker's
optimizer would import anyway (_PRELOADS); $TRAINPARITY_WARM_PRELOAD names
such modules for any other command.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import json
import os
import re
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

from trainparity.distributed.launch import is_torchrun
from trainparity.native.core import core
from trainparity.processes.group import ChildLaunchError, ChildSpec, spawn_child
from trainparity.processes.warm_pool import SharedWarmServers

__all__ = [
    "PRELOAD_VARIABLE",
    "START_MODES",
    "START_VARIABLE",
    "WARM_RANKS_VARIABLE",
    "ChildStarter",
    "checked_start",
    "warm_refusal",
]

START_MODES = ("fresh", "warm")
START_VARIABLE = "TRAINPARITY_START"
"""The start mode of a check whose caller passed no `start` (the test suite sets "warm")."""

_SERVER_SCRIPT = Path(__file__).with_name("warm_server.py")
# Variables that differ between the children of one check, or between checks, and that
# importing torch does not read: trainparity's own (recording, tags), the rendezvous of a rank
# (read by init_process_group) and pytest's name of the running test (which checks run from a
# suite pass on; only torch.testing's internals read it). Children that differ only in these
# share a server, and so do the checks of a suite (shared_warm_servers).
_PER_PHASE_PREFIX = "TRAINPARITY_"
_PER_CHILD_VARIABLES = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "PYTEST_CURRENT_TEST"}
)
# Each check's torchrun phases have their own TMPDIR (distributed/phases.py). A server has its
# own instead (beside its log), and a child takes its temporary directory, and what the
# server's imports made there, from its own TMPDIR (warm_main.py): so TMPDIR is no server's key.
_TEMPORARY_VARIABLE = "TMPDIR"
_HASH_SEED = "PYTHONHASHSEED"
# Room for a child's command and environment in /proc/PID/cmdline and environ: the kernel shows
# the strings the server was exec'd with, and a child writes its own over them (warm_main.py).
# An argument and a variable of these sizes make that room; the server drops both.
_ROOM_VARIABLE = "TRAINPARITY_WARM_ROOM"
_ENVIRONMENT_ROOM = f"{_ROOM_VARIABLE}={'.' * 16384}"
_ARGUMENT_ROOM = " " * 8192  # last, and blank: ps shows the server's command as it is
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_CONNECT_SECONDS = 30.0
_READY_SECONDS = 120.0  # for a server's import of torch (and what it preloads) and each fork
_ADOPTION_SECONDS = 5.0  # a killed child's middle exits at once: this is never reached
# Modules of torch's own that a child imports anyway, preloaded by its server. torch.optim
# imports torch._dynamo on a process's first optimizer: 4.3 s of CPU here, three times torch's
# own import. The accumulation worker always builds one; for any other command the caller
# names them in PRELOAD_VARIABLE, since a phase that builds no optimizer would only wait for
# the longer import. (Ranks of multi-rank accumulation checks hung after this preload once: a
# DDP Reducer freed the gloo group with the GIL held, a race the preload only made likelier;
# accumulation/ranks.py now frees the group last.)
_PRELOADS: dict[str, tuple[str, ...]] = {"trainparity.accumulation.worker": ("torch._dynamo",)}
PRELOAD_VARIABLE = "TRAINPARITY_WARM_PRELOAD"
"""Comma-separated modules of torch's own (e.g. torch._dynamo) a warm server imports too."""
WARM_RANKS_VARIABLE = "TRAINPARITY_WARM_RANKS"
""""1" (the default) or "0": whether a warm `python -m torch.distributed.run` agent forks its
ranks warm too (warm_ranks.py), or execs them as torchrun does."""
_AGENT_MODULE = "torch.distributed.run"
_COREUTILS_ENV = frozenset(os.path.realpath(path) for path in ("/usr/bin/env", "/bin/env"))
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def checked_start(start: object) -> str:
    """The start mode: `start`, else $TRAINPARITY_START, else "fresh"; ValueError if unknown."""
    origin = "start"
    if start is None:
        start, origin = os.environ.get(START_VARIABLE) or "fresh", START_VARIABLE
    if start not in START_MODES:
        raise ValueError(f"{origin} must be 'fresh' or 'warm', not {start!r}")
    return str(start)


def warm_refusal(argv: tuple[str, ...] | list[str], environment: Mapping[str, str]) -> str | None:
    """Why `argv` cannot be forked from a warm server (None: it can)."""
    program = _resolved_program(argv[0], environment)
    if os.path.abspath(program) != os.path.abspath(sys.executable):
        return f"{argv[0]!r} is not this Python interpreter ({sys.executable})"
    if len(argv) >= 3 and argv[1] == "-m" and argv[2] and not argv[2].startswith("-"):
        return None
    if len(argv) >= 3 and argv[1] == "-c":
        return None
    if len(argv) >= 2 and argv[1] and not argv[1].startswith("-"):
        return None
    return (
        "only `python script.py`, `python -m module` and `python -c code` (also behind "
        "`env NAME=VALUE …`) are forked warm"
    )


# A server's environment (its variables, sorted) and the modules it preloads.
_ServerKey = tuple[tuple[tuple[str, str], ...], tuple[str, ...]]


class ChildStarter:
    """Starts every child of one check, fresh or warm; records which way each started.

    `report` is the report's `child_start` entry (warm mode): the phases forked
    warm, and each phase started fresh with the reason. With `shared` (an open
    `shared_warm_servers()`), servers are borrowed from it and given back on
    `close`, instead of started here and stopped.
    """

    def __init__(
        self,
        mode: str,
        *,
        log_dir: Path,
        timeout: float,
        shared: SharedWarmServers | None = None,
    ) -> None:
        self.mode = mode
        self.log_dir = log_dir
        self.timeout = timeout
        self.shared = shared
        self.report: dict[str, Any] = {"mode": mode, "warm": [], "fresh": {}}
        # One server per (its environment, its preloaded modules).
        self._servers: dict[_ServerKey, _WarmServer] = {}
        self._broken: dict[_ServerKey, str] = {}
        self._unshared: set[_ServerKey] = set()  # servers seeded for one phase, or started when
        # the shared servers had closed: stopped with this check, never given back

    def launch(self, spec: ChildSpec) -> int:
        """Start `spec` now; its pid, a child of this process. ChildLaunchError if it cannot."""
        if self.mode == "fresh":
            return spawn_child(spec)
        exec_spec = _env_execs(spec)
        refusal = warm_refusal(exec_spec.argv, exec_spec.env)
        if refusal is not None:
            self.report["fresh"][spec.name] = refusal
            return spawn_child(spec)
        spec = exec_spec
        environment = dict(spec.env)
        server_environment = environment
        one_phase = environment.get(_HASH_SEED, "random") == "random"
        if one_phase:
            # A forked child keeps its server's str hashes: a phase without a fixed seed
            # gets a server seeded for it alone, as a fresh process draws its own. The child's
            # own environment stays the phase's (no PYTHONHASHSEED), as a fresh one's would.
            seed = str(1 + secrets.randbelow(4294967295))
            server_environment = {**environment, _HASH_SEED: seed}
        try:
            preload = _preloaded_modules(spec.argv, environment)
        except ValueError as error:
            self.report["fresh"][spec.name] = f"{error}; started fresh"
            return spawn_child(spec)
        variables = sorted(item for item in server_environment.items() if _server_variable(item[0]))
        key = (tuple(variables), preload)
        if key in self._broken:
            self.report["fresh"][spec.name] = self._broken[key]
            return spawn_child(spec)
        if is_torchrun(spec.argv) and not _shows_environment(
            spec.argv, environment, variables, preload
        ):
            # The rank watcher tells the agent's ranks by the agent's environment in /proc.
            self.report["fresh"][spec.name] = (
                "its command and environment are longer than a forked child can show in /proc, "
                "where the rank watcher reads a torchrun agent's"
            )
            return spawn_child(spec)
        try:
            server = self._servers.get(key)
            if server is None:
                if one_phase:
                    self._unshared.add(key)
                server = self._servers[key] = self._server(key, dict(variables), preload)
            pid = server.fork(spec, environment, self.timeout)
        except _ServerFailure as failure:
            self._servers.pop(key).close()
            self._broken[key] = f"the warm server failed ({failure}); started fresh"
            self.report["fresh"][spec.name] = self._broken[key]
            return spawn_child(spec)
        self.report["warm"].append(spec.name)
        return pid

    def _server(
        self, key: _ServerKey, environment: dict[str, str], preload: tuple[str, ...]
    ) -> _WarmServer:
        """A shared idle server of `key`, else a new one (in the shared servers' directory)."""
        shared = self.shared if key not in self._unshared else None
        if shared is not None:
            server = shared.take(key)
            if server is not None:
                return server  # type: ignore[return-value]  # the shared servers hold only ours
            place = shared.server_directory()
            if place is not None:
                return _WarmServer(environment, preload, *place, start_in=shared.in_own_thread)
        # Not shared (or the shared servers closed meanwhile): this check's own.
        self._unshared.add(key)
        index = len(self._servers) + len(self._broken)
        return _WarmServer(environment, preload, self.log_dir, index)

    def close(self) -> None:
        """Stop every server, or give it back to the shared ones (the children they forked are
        this process's, not theirs)."""
        for key, server in self._servers.items():
            if self.shared is not None and key not in self._unshared and server.alive():
                self.shared.give_back(key, server)
            else:
                server.close()
        self._servers.clear()


def _resolved_program(program: str, environment: Mapping[str, str]) -> str:
    """`program` as exec would find it: a bare name looked up in the environment's PATH."""
    if os.sep in program:
        return program
    return shutil.which(program, path=environment.get("PATH", os.defpath)) or program


def _env_execs(spec: ChildSpec) -> ChildSpec:
    """What `env NAME=VALUE … command` execs: `command`, with the variables set; else `spec`.

    Only the env of coreutils and plain assignments: env sets each variable
    (replacing it where it stands, else appending it), then execs `command`
    looked up in the new PATH; a forked child shows the same argv, environment
    and order in /proc. With an option (`-i`, `-u`, …) or a name env would
    take as something else, the command stays as it is and starts fresh.
    """
    argv = list(spec.argv)
    if os.path.basename(argv[0]) != "env":
        return spec
    if os.path.realpath(_resolved_program(argv[0], spec.env)) not in _COREUTILS_ENV:
        return spec
    environment = dict(spec.env)
    index = 1
    while index < len(argv) and "=" in argv[index]:
        name, _, value = argv[index].partition("=")
        if not _VARIABLE_NAME.fullmatch(name):
            return spec
        environment[name] = value
        index += 1
    if index == len(argv) or argv[index].startswith("-"):
        return spec  # env's own option, or nothing to exec
    return dataclasses.replace(spec, argv=argv[index:], env=environment)


def _preloaded_modules(
    argv: tuple[str, ...] | list[str], environment: Mapping[str, str]
) -> tuple[str, ...]:
    """What the child's server imports beyond torch and numpy; ValueError for a module not torch's."""
    named = {name.strip() for name in environment.get(PRELOAD_VARIABLE, "").split(",")}
    named.discard("")
    for name in sorted(named):
        if name != "torch" and not name.startswith("torch."):
            raise ValueError(
                f"{PRELOAD_VARIABLE} names {name!r}: a warm server imports only torch's own "
                "modules (such as torch._dynamo), never the user's"
            )
    if len(argv) >= 3 and argv[1] == "-m":
        named.update(_PRELOADS.get(argv[2], ()))
    if environment.get(WARM_RANKS_VARIABLE, "1") not in ("0", "1"):
        raise ValueError(
            f"{WARM_RANKS_VARIABLE} must be '1' (fork a torchrun agent's ranks warm, the "
            f"default) or '0' (exec them), not {environment[WARM_RANKS_VARIABLE]!r}"
        )
    if _forks_ranks_warm(argv, environment):
        named.add("torch._dynamo")  # the ranks forked from its zygote build optimizers
    return tuple(sorted(named))


def _forks_ranks_warm(argv: tuple[str, ...] | list[str], environment: Mapping[str, str]) -> bool:
    """Whether a warm torchrun agent forks its ranks warm too (warm_ranks.py).

    Unless told not to, and only with a fixed hash seed: forked ranks keep their
    zygote's str hashes, where fresh ones without PYTHONHASHSEED each draw their own.
    """
    return (
        list(argv[1:3]) == ["-m", _AGENT_MODULE]
        and environment.get(WARM_RANKS_VARIABLE, "1") == "1"
        and environment.get(_HASH_SEED, "random") != "random"
    )


def _packed_size(strings: list[str]) -> int:
    return sum(len(os.fsencode(string)) + 1 for string in strings)


def _server_name() -> str:
    return f"trainparity-warm-{secrets.token_hex(16)}"


def _server_argv(name: str, preload: tuple[str, ...]) -> list[str]:
    return [sys.executable, str(_SERVER_SCRIPT), name, *preload, _ARGUMENT_ROOM]


def _shows_environment(
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


def _server_variable(name: str) -> bool:
    """Whether `name` belongs in the server's environment (and so in its key)."""
    return (
        not name.startswith(_PER_PHASE_PREFIX)
        and name not in _PER_CHILD_VARIABLES
        and name != _TEMPORARY_VARIABLE
    )


class _ServerFailure(Exception):
    """The server could not fork a child (it died, or broke the protocol): start fresh instead."""


class _WarmServer:
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
        environment = {**environment, _TEMPORARY_VARIABLE: str(self.temporary)}
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
            raise _ServerFailure(f"it could not start: {error}") from None
        self.connection: socket.socket | None = None
        self.buffer = b""
        self.reaped = False

    def fork(self, spec: ChildSpec, environment: dict[str, str], timeout: float) -> int:
        request = {
            "argv": list(spec.argv),
            "cwd": str(spec.cwd),
            "env": environment,
            "stdout": os.path.abspath(spec.stdout_path),
            "stderr": os.path.abspath(spec.stderr_path),
            "warm_ranks": _forks_ranks_warm(spec.argv, environment),
        }
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
                    _kill_and_reap(forked)
                raise
        if "pid" not in reply:
            raise _ServerFailure(str(reply.get("error", "no pid in the reply")))
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
                    raise _ServerFailure(self._died()) from None
                time.sleep(0.005)
        if _peer_pid(connection) != self.pid:  # someone else's socket of that name
            connection.close()
            raise _ServerFailure("another process answered on the server's socket")
        self.connection = connection
        try:
            ready = self._reply(deadline, ready=True)  # torch imported (seconds)
        except BaseException:
            self.close()
            raise
        if ready != "ready":
            raise _ServerFailure(f"unexpected greeting {ready!r}")
        return connection

    def _reply(self, deadline: float, *, ready: bool = False) -> Any:
        assert self.connection is not None
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _ServerFailure("no reply within the timeout")
            readable, _, _ = select.select([self.connection], [], [], min(remaining, 1.0))
            if not readable:
                continue
            chunk = self.connection.recv(65536)
            if not chunk:
                raise _ServerFailure(self._died())
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


def _kill_and_reap(pid: int) -> None:
    """Kill a forked child whose request failed, and reap it once it is this process's.

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
                raise _ServerFailure("this process cannot adopt the forked child (prctl)")
        _subreaper_users += 1
    try:
        yield
    finally:
        with _subreaper_lock:
            _subreaper_users -= 1
            if _subreaper_users == 0 and not _subreaper_was_set:
                libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
