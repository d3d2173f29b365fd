"""How a check starts its children: each a fresh interpreter, or forked from a warm server.

A ChildStarter is the one seam: ChildGroup calls its `launch` where it would
spawn. `start="fresh"` (the default) execs a new interpreter per child;
`start="warm"` forks a child from a server that imported torch once, when its
command allows it, and otherwise starts it fresh and says why in the report.

What is forked: `python script.py …`, `python -m module …` and `python -c code …`
(python being this interpreter, with no options of its own), also behind
`env NAME=VALUE …`, which is how plan_command passes a phase plan: such a
command is forked as what env would exec. `python -m torch.distributed.run` is
forked too (pip's `torchrun` script for this interpreter as that command)
when its command and environment fit where /proc shows a forked child's
(the rank watcher finds an agent's ranks by that environment); its
agent then forks its ranks from a zygote (rank_zygote.py) unless
TRAINPARITY_WARM_RANKS=0. A console script of a module in
torchrun_argv.SCRIPT_FORM_MODULES is forked as the script itself (`python
…/bin/NAME …`, what the kernel makes of its shebang), and a launcher that
torchrun_argv.forked_launcher names forks its per-node launch process, which
forks its ranks, the same way.

One server serves every child of the same environment, PYTHONPATH aside where
its directories hold nothing the server's imports looked up (path_lookups.py);
a child whose PYTHONPATH does gets a server started with it. Servers live as long as
the check (closed with it, and killed by their parent-death signal if the check
dies) or, inside `shared_warm_servers()` (pool.py), are borrowed from the
process's shared ones and given back. The accumulation worker's server also
imports torch._dynamo, which each worker's optimizer would import anyway
(_PRELOADS); $TRAINPARITY_WARM_PRELOAD names such modules for any other command, torch's
own or an installed library's (preloads.py).
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainparity._internal.distributed.torchrun_argv import (
    NODES_MODULE,
    SCRIPT_FORM_MODULES,
    forked_launcher,
    is_torchrun,
)
from trainparity._internal.processes.group import ChildSpec, spawn_child
from trainparity._internal.processes.progress import ProgressReporter
from trainparity._internal.processes.warm.path_lookups import (
    PATH_VARIABLE,
    path_conflict,
    python_path_entries,
    searched_first,
)
from trainparity._internal.processes.warm.pool import ServerThread, SharedWarmServers
from trainparity._internal.processes.warm.preloads import IDENTIFIER, preload_refusal
from trainparity._internal.processes.warm.server_handle import (
    TEMPORARY_VARIABLE,
    ServerFailure,
    WarmServer,
    shows_environment,
)

__all__ = [
    "PRELOAD_VARIABLE",
    "START_MODES",
    "START_VARIABLE",
    "UNSHARED_KEY",
    "WARM_RANKS_VARIABLE",
    "ChildStarter",
    "checked_start",
    "warm_refusal",
]

START_MODES = ("fresh", "warm")
START_VARIABLE = "TRAINPARITY_START"
"""The start mode of a check whose caller passed no `start` (the test suite sets "warm")."""

# Variables that differ between the children of one check, or between checks, and that
# importing torch does not read: trainparity's own (recording, tags), the rendezvous of a rank
# (read by init_process_group), the port a check gives each torchrun launch with a static
# rendezvous (PET_MASTER_PORT, torchrun_argv.own_port: read by torchrun's argument parser when
# the agent's main runs, after the fork) and pytest's name of the running test (which checks
# run from a suite pass on; only torch.testing's internals read it). Children that differ only
# in these share a server, and so do the checks of a suite (shared_warm_servers).
_PER_PHASE_PREFIX = "TRAINPARITY_"
_PER_CHILD_VARIABLES = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "PET_MASTER_PORT",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "PYTEST_CURRENT_TEST",
    }
)
_HASH_SEED = "PYTHONHASHSEED"
UNSHARED_KEY = "unshared"
"""The `child_start` key that says why no phase shares a server (no fixed PYTHONHASHSEED)."""
# Modules of torch's own that a child imports anyway, preloaded by its server. torch.optim
# imports torch._dynamo on a process's first optimizer: 4.3 s of CPU here, three times torch's
# own import. The accumulation worker always builds one; for any other command the caller
# names them in PRELOAD_VARIABLE, since a phase that builds no optimizer would only wait for
# the longer import. A DDP Reducer that frees the gloo group with the GIL held can hang the ranks
# of a multi-rank accumulation check, a race this preload makes likelier; so
# accumulation/ranks.py frees the group last.
_PRELOADS: dict[str, tuple[str, ...]] = {
    "trainparity._internal.accumulation.worker": ("torch._dynamo",)
}
PRELOAD_VARIABLE = "TRAINPARITY_WARM_PRELOAD"
"""Comma-separated modules a warm server imports too: torch's own (torch._dynamo) or those of
libraries installed in site-packages, never the user's (preloads.preload_refusal)."""
WARM_RANKS_VARIABLE = "TRAINPARITY_WARM_RANKS"
""""1" (the default) or "0": whether a warm `python -m torch.distributed.run` agent forks its
ranks warm too (rank_zygote.py), or execs them as torchrun does."""
_AGENT_MODULE = "torch.distributed.run"
# Console scripts forked warm as `python -m MODULE` (_console_script_execs).
_MODULE_SCRIPTS = frozenset({_AGENT_MODULE})
_MODULE_MAIN = re.compile(r"^from ([A-Za-z_][\w.]*) import main$", re.MULTILINE)
_COREUTILS_ENV = frozenset(os.path.realpath(path) for path in ("/usr/bin/env", "/bin/env"))


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
    warm, each phase started fresh with the reason, and `unshared` when a
    phase had no fixed hash seed (said once to `progress` too). With `shared` (an open
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
        progress: ProgressReporter | None = None,
    ) -> None:
        self.mode = mode
        self.progress = progress
        self.log_dir = log_dir
        self.timeout = timeout
        self.shared = shared
        self.report: dict[str, Any] = {"mode": mode, "warm": [], "fresh": {}}
        # One server per (its environment, its preloaded modules).
        self._servers: dict[_ServerKey, WarmServer] = {}
        self._broken: dict[_ServerKey, str] = {}
        self._lock = threading.Lock()  # a crash check forks from two threads
        # This check's own servers start there: the crash check forks from a pool of two.
        self._server_thread = ServerThread("trainparity-warm-server")
        self._unshared: set[_ServerKey] = set()  # servers seeded for one phase, or started when
        # the shared servers had closed: stopped with this check, never given back

    def launch(self, spec: ChildSpec) -> int:
        """Start `spec` now; its pid, a child of this process. ChildLaunchError if it cannot."""
        if self.mode == "fresh":
            return spawn_child(spec)
        pid = self.warm_fork(spec)
        return pid if pid is not None else spawn_child(spec)

    def warm_fork(self, spec: ChildSpec, *, trace_filter: bytes | None = None) -> int | None:
        """Fork `spec` from a warm server now; its pid, a child of this process.

        None where it must start fresh instead (warm mode is off, or the report's
        `child_start` says why for this child). ChildLaunchError if its setup failed.
        `trace_filter`: the child waits for the crash check's tracer (trace_pid).
        """
        if self.mode == "fresh":
            return None
        with self._lock:  # one request at a time on a server's connection
            return self._warm_fork(spec, trace_filter)

    def _warm_fork(self, spec: ChildSpec, trace_filter: bytes | None) -> int | None:
        exec_spec = _console_script_execs(_env_execs(spec))
        refusal = warm_refusal(exec_spec.argv, exec_spec.env)
        if refusal is not None:
            self.report["fresh"][spec.name] = refusal
            return None
        spec = exec_spec
        environment = dict(spec.env)
        server_environment = environment
        one_phase = environment.get(_HASH_SEED, "random") == "random"
        if one_phase:
            self._say_unshared(environment)
            # A forked child keeps its server's str hashes: a phase without a fixed seed
            # gets a server seeded for it alone, as a fresh process draws its own. The child's
            # own environment stays the phase's (no PYTHONHASHSEED), as a fresh one's would.
            seed = str(1 + secrets.randbelow(4294967295))
            server_environment = {**environment, _HASH_SEED: seed}
        try:
            preload = _preloaded_modules(spec.argv, environment)
        except ValueError as error:
            self.report["fresh"][spec.name] = f"{error}; started fresh"
            return None
        variables = sorted(item for item in server_environment.items() if _server_variable(item[0]))
        # First a server started without the phase's PYTHONPATH, shared with other paths; else
        # one started with it, each directory made absolute against the phase's cwd as a fresh
        # interpreter's are (the server runs elsewhere), when that server's imports would have
        # found other files there.
        entries = python_path_entries(
            environment.get(PATH_VARIABLE, ""), os.path.realpath(spec.cwd)
        )
        shared = tuple(item for item in variables if item[0] != PATH_VARIABLE)
        keys = [(shared, preload)]
        if entries:
            keys.append(
                (tuple(sorted([*shared, (PATH_VARIABLE, os.pathsep.join(entries))])), preload)
            )
        if is_torchrun(spec.argv) and not shows_environment(
            spec.argv, environment, list(keys[0][0]), preload
        ):
            # The rank watcher tells the agent's ranks by the agent's environment in /proc.
            # (Measured against the smaller server environment: it fits the other too.)
            self.report["fresh"][spec.name] = (
                "its command and environment are longer than a forked child can show in /proc, "
                "where the rank watcher reads a torchrun agent's"
            )
            return None
        first = searched_first(list(spec.argv), str(spec.cwd))
        try:
            server, key = self._server_for(keys, first, entries, one_phase)
        except _StartFresh as fresh:
            self.report["fresh"][spec.name] = str(fresh)
            return None
        try:
            warm_ranks = _forks_ranks_warm(spec.argv, environment)
            pid = server.fork(
                spec,
                environment,
                self.timeout,
                warm_ranks=warm_ranks,
                launcher=forked_launcher(spec.argv) if warm_ranks else None,
                trace_filter=trace_filter,
            )
        except ServerFailure as failure:
            self._servers.pop(key).close()
            self._broken[key] = f"the warm server failed ({failure}); started fresh"
            self.report["fresh"][spec.name] = self._broken[key]
            return None
        self.report["warm"].append(spec.name)
        return pid

    def _server_for(
        self, keys: list[_ServerKey], first: str, entries: list[str], one_phase: bool
    ) -> tuple[WarmServer, _ServerKey]:
        """The server of the first of `keys` whose imports a child that searches `first`, then
        its PYTHONPATH `entries`, would repeat as they were (the last key's server has that
        PYTHONPATH itself), and its key; started or borrowed when this check has none.
        _StartFresh when none can fork it, or the last is broken (one before it is passed
        over)."""
        last = len(keys) - 1
        for index, key in enumerate(keys):
            if key in self._broken:
                if index == last:
                    raise _StartFresh(self._broken[key])
                continue
            try:
                server = self._servers.get(key)
                if server is None:
                    if one_phase:
                        self._unshared.add(key)
                    server = self._servers[key] = self._server(key, dict(key[0]), key[1])
                lookups = server.lookups(self.timeout)
            except ServerFailure as failure:
                self._servers.pop(key).close()
                self._broken[key] = f"the warm server failed ({failure}); started fresh"
                if index == last:
                    raise _StartFresh(self._broken[key]) from None
                continue
            # The script's directory first: no server's sys.path has it.
            conflict = path_conflict([first], lookups)
            if conflict is None and index < last:
                conflict = path_conflict(entries, lookups)
                if conflict is not None:
                    continue  # the server started with this PYTHONPATH, next
            if conflict is not None:
                raise _StartFresh(f"a fresh interpreter would import otherwise: {conflict}")
            return server, key
        raise AssertionError("the last key always serves or raises")  # pragma: no cover

    def _say_unshared(self, environment: Mapping[str, str]) -> None:
        """Say once, in the report and the progress output, why no phase shares a server."""
        if UNSHARED_KEY in self.report:
            return
        unset = "is 'random'" if _HASH_SEED in environment else "is not set"
        self.report[UNSHARED_KEY] = unshared = (
            f"warm mode shares no server here: PYTHONHASHSEED {unset}, so each phase is forked "
            "from a server of its own, which imports torch for that phase alone (a forked child "
            "keeps its server's str hashes, and each phase must draw its own, as a fresh process "
            "does); set PYTHONHASHSEED=0 in the phases' environment (export it, or environment=) "
            "for them to share one server that imports torch once"
        )
        if self.progress is not None:
            self.progress.note(unshared)

    def _server(
        self, key: _ServerKey, environment: dict[str, str], preload: tuple[str, ...]
    ) -> WarmServer:
        """A shared idle server of `key`, else a new one (in the shared servers' directory)."""
        shared = self.shared if key not in self._unshared else None
        if shared is not None:
            server = shared.take(key)
            if server is not None:
                return server  # type: ignore[return-value]  # the shared servers hold only ours
            place = shared.server_directory()
            if place is not None:
                return WarmServer(environment, preload, *place, start_in=shared.in_own_thread)
        # Not shared (or the shared servers closed meanwhile): this check's own.
        self._unshared.add(key)
        index = len(self._servers) + len(self._broken)
        return WarmServer(
            environment, preload, self.log_dir, index, start_in=self._server_thread.run
        )

    def close(self) -> None:
        """Stop every server, or give it back to the shared ones (the children they forked are
        this process's, not theirs)."""
        for key, server in self._servers.items():
            if self.shared is not None and key not in self._unshared and server.alive():
                self.shared.give_back(key, server)
            else:
                server.close()
        self._servers.clear()
        self._server_thread.close()


class _StartFresh(Exception):
    """The child starts fresh instead, for the reason given."""


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
        if not IDENTIFIER.fullmatch(name):
            return spec
        environment[name] = value
        index += 1
    if index == len(argv) or argv[index].startswith("-"):
        return spec  # env's own option, or nothing to exec
    return dataclasses.replace(spec, argv=argv[index:], env=environment)


def _console_script_execs(spec: ChildSpec) -> ChildSpec:
    """`python -m MODULE …` for a console script that runs MODULE's main; else `spec`.

    Only the scripts pip writes beside this interpreter (its shebang this
    interpreter, `from MODULE import main`, `sys.exit(main())`) for the modules
    in _MODULE_SCRIPTS, whose `python -m` form runs the same main: `torchrun`
    is torch.distributed.run's. Forked warm, it shows `python -m MODULE` in /proc.
    """
    program = _resolved_program(spec.argv[0], spec.env)
    # Nearly every child names this interpreter itself: no script to read (and no binary).
    if os.sep not in program or os.path.abspath(program) == os.path.abspath(sys.executable):
        return spec
    try:
        with open(program, "rb") as handle:
            head = handle.read(2048).decode()
    except (OSError, UnicodeDecodeError):
        return spec
    shebang, _, body = head.partition("\n")
    interpreter = shebang[2:].strip() if shebang.startswith("#!") else ""
    if not interpreter or not _is_this_interpreter(interpreter):
        return spec
    found = _MODULE_MAIN.search(body)
    if found is not None and found.group(1) in SCRIPT_FORM_MODULES and "main()" in body:
        # What exec makes of `#!python`: the interpreter, then the script's path.
        return dataclasses.replace(spec, argv=[sys.executable, program, *spec.argv[1:]])
    if found is None or found.group(1) not in _MODULE_SCRIPTS or "sys.exit(main())" not in body:
        return spec
    return dataclasses.replace(spec, argv=[sys.executable, "-m", found.group(1), *spec.argv[1:]])


def _is_this_interpreter(path: str) -> bool:
    """Whether `path` is sys.executable: the same venv's python (not only the same base one)."""
    here = os.path.abspath(sys.executable)
    there = os.path.abspath(path)
    return os.path.dirname(there) == os.path.dirname(here) and os.path.realpath(
        there
    ) == os.path.realpath(here)


def _preloaded_modules(
    argv: tuple[str, ...] | list[str], environment: Mapping[str, str]
) -> tuple[str, ...]:
    """What the child's server imports beyond torch and numpy; ValueError for a module not torch's."""
    named = {name.strip() for name in environment.get(PRELOAD_VARIABLE, "").split(",")}
    named.discard("")
    for name in sorted(named):
        refusal = preload_refusal(name)
        if refusal is not None:
            raise ValueError(f"{PRELOAD_VARIABLE} names {name!r}: {refusal}")
    if len(argv) >= 3 and argv[1] == "-m":
        named.update(_PRELOADS.get(argv[2], ()))
    if environment.get(WARM_RANKS_VARIABLE, "1") not in ("0", "1"):
        raise ValueError(
            f"{WARM_RANKS_VARIABLE} must be '1' (fork a torchrun agent's ranks warm, the "
            f"default) or '0' (exec them), not {environment[WARM_RANKS_VARIABLE]!r}"
        )
    if _forks_ranks_warm(argv, environment):
        named.add("torch._dynamo")  # the ranks forked from its zygote build optimizers
        launcher = forked_launcher(argv)
        if launcher is not None and preload_refusal(launcher["preload"]) is None:
            named.add(launcher["preload"])  # what the launcher, its launches and ranks import
    return tuple(sorted(named))


def _forks_ranks_warm(argv: tuple[str, ...] | list[str], environment: Mapping[str, str]) -> bool:
    """Whether a warm torchrun agent forks its ranks warm too (rank_zygote.py), the node
    launcher (distributed/nodes.py) its agents, which then fork their ranks, and a launcher
    torchrun_argv.forked_launcher names its per-node launches, which fork their ranks.

    Unless told not to, and only with a fixed hash seed: forked ranks keep their
    zygote's str hashes, where fresh ones without PYTHONHASHSEED each draw their own.
    """
    return (
        (
            list(argv[1:3]) in (["-m", _AGENT_MODULE], ["-m", NODES_MODULE])
            or forked_launcher(argv) is not None
        )
        and environment.get(WARM_RANKS_VARIABLE, "1") == "1"
        and environment.get(_HASH_SEED, "random") != "random"
    )


def _server_variable(name: str) -> bool:
    """Whether `name` belongs in the server's environment (and so in its key)."""
    return (
        not name.startswith(_PER_PHASE_PREFIX)
        and name not in _PER_CHILD_VARIABLES
        and name != TEMPORARY_VARIABLE
    )
