"""In a torchrun agent forked warm: fork its ranks warm too, from a zygote made before torchrun runs.

A phase's environment turns this off with TRAINPARITY_WARM_RANKS=0. A forked
rank does less work than a fresh one (no import of torch): it may end within
one sample of the rank watcher (so its row comes from its measured exit,
below), and its peak RSS leaves out the pages of torch that only the import
touched (docs/limitations.md).

Loaded by server.py from its file (standard library only, nothing of
trainparity in sys.modules), in an agent child (`python -m
torch.distributed.run …`) right after child_side.become_fresh. `install`
forks the zygote first: a copy of the agent taken before any of torchrun's
code ran, so as pristine as the warm server itself (torch imported, no op
run, no thread). Then it replaces torchrun's SubprocessHandler._popen, the
one place the agent starts a rank, with a Popen whose child the zygote forks
through a middle process while the agent is a child subreaper: the rank is
the agent's own child, as torchrun's Popen would make it (waitpid, killpg).

The node launcher of a multi-node phase (distributed/nodes.py) forked warm
gets a zygote the same way (install_agents), which forks each torchrun agent
it starts with os.posix_spawnp; each agent then installs its own for its
ranks. A launcher that starts one launch process per node, which starts
the ranks (distributed/torchrun_argv.py's forked_launcher names it and what
may differ at each level), does too (install_launches): its zygote forks
the `python -u -m LAUNCH_MODULE` it starts with subprocess.Popen, and that
one's zygote forks each rank it starts, in the launcher's session and with
the standard streams its Popen gives them.

A rank is forked only when a fresh one would start exactly alike: its
command is this interpreter with `-u` and a script or `-m module`, and its
environment is the agent's plus only the variables torchrun sets per rank
(none read by importing torch; not OMP_NUM_THREADS, which the OpenMP runtime
reads when torch loads it), with a fixed PYTHONHASHSEED (a forked rank
keeps the zygote's str hashes, a fresh one without it draws its own), and
/proc can show its command and environment (the rank watcher reads them).
Any other rank, and every rank after the zygote failed, starts as torchrun
starts it. Per rank, as `python -u` would: its own session, stdout and
stderr the files torchrun opened for it (passed over the socket), other
descriptors closed, standard streams unbuffered.

A forked rank is reaped with wait4, and what the kernel measured (CPU time,
peak RSS, exit status) is appended to the phase's rank exits file
(TRAINPARITY_RANK_EXITS_FILE; its format is in distributed/rank_processes.py):
its row then does not depend on sampling a rank that may end within one
sample. A rank started as torchrun starts it is sampled, as in a fresh agent:
wait4's peak RSS of a process that exec'd counts the memory of the one it
replaced (here the agent).
"""

from __future__ import annotations

import atexit
import ctypes
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_REPARENT_SECONDS = 10.0  # the middle process exits right after its fork: never reached
_REPLY_SECONDS = 60.0
# What torchrun's agent sets per rank, none of it read by importing torch.
_RANK_VARIABLES = frozenset(
    {
        "LOCAL_RANK",
        "RANK",
        "GROUP_RANK",
        "ROLE_RANK",
        "ROLE_NAME",
        "LOCAL_WORLD_SIZE",
        "WORLD_SIZE",
        "GROUP_WORLD_SIZE",
        "ROLE_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "NCCL_ASYNC_ERROR_HANDLING",
    }
)
_RANK_PREFIXES = ("TORCHELASTIC_", "TRAINPARITY_")
_AGENT_MODULE = "torch.distributed.run"
# trainparity._internal.distributed.nodes, the node launcher (nothing of trainparity is imported here).
NODES_MODULE = "trainparity._internal.distributed.nodes"
# trainparity._internal.distributed.phases.RANK_EXITS_FILE_VARIABLE (nothing of trainparity is imported here).
_RANK_EXITS_FILE_VARIABLE = "TRAINPARITY_RANK_EXITS_FILE"


def install(
    child_side,
    environment: dict[str, str],
    argv: list[str] | None = None,
    launcher: dict | None = None,
) -> None:
    """Fork the zygote and route torchrun's rank starts through it (nothing when it cannot).

    In the node launcher (`argv` runs NODES_MODULE), the zygote forks its
    torchrun agents instead, each of which then installs a zygote of its own
    for its ranks (install_agents). Called only when the check asked for it,
    with a fixed hash seed (starter.py).
    """
    if argv is not None and list(argv[1:3]) == ["-m", NODES_MODULE]:
        install_agents(child_side, environment)
        return
    if launcher is not None:
        install_launches(child_side, environment, launcher)
        return
    agent_end = _start_zygote(child_side)
    try:
        from torch.distributed.elastic.multiprocessing.subprocess_handler import (
            subprocess_handler,
        )
    except ImportError:
        subprocess_handler = None
    handler = getattr(subprocess_handler, "SubprocessHandler", None)
    if handler is None or _parameters(handler._popen) != ["self", "args", "env"]:
        return  # a torch whose rank start this does not know: every rank starts fresh
    _ForkedRankPopen.zygote = _Zygote(agent_end, dict(environment), child_side)
    _ForkedRankPopen.exits_file = environment.get(_RANK_EXITS_FILE_VARIABLE) or None

    def _popen(self, args, env):  # torchrun's own _popen, on POSIX
        return _ForkedRankPopen(
            args=args, env=env, stdout=self._stdout, stderr=self._stderr, start_new_session=True
        )

    handler._popen = _popen


def install_agents(child_side, launcher_environment: dict[str, str]) -> None:
    """In the node launcher forked warm: its torchrun agents forked from a zygote (nodes.py).

    The launcher starts each agent with os.posix_spawnp; an agent whose command
    is this interpreter's `-m torch.distributed.run` and whose environment is
    the launcher's but for TRAINPARITY_ variables (TRAINPARITY_NODE) is forked
    instead, as posix_spawnp leaves a child (the launcher's process group,
    session and standard streams, no other descriptor), and forks its ranks
    from a zygote of its own. Any other, and every one after the zygote
    failed, is spawned as before.
    """
    zygote = _Zygote(_start_zygote(child_side), dict(launcher_environment), child_side)
    spawn = os.posix_spawnp

    def posix_spawnp(path, argv, env, **options):
        arguments = [os.fsdecode(argument) for argument in argv]
        environment = {os.fsdecode(name): os.fsdecode(value) for name, value in env.items()}
        directory = os.getcwd()
        if (
            options
            or path != sys.executable
            or zygote.agent_refusal(arguments, environment, directory)
        ):
            return spawn(path, argv, env, **options)
        request = {"argv": arguments, "cwd": directory, "env": environment, "agent": True}
        try:
            return zygote.fork(request, [])
        except OSError:
            zygote.broken = True
            return spawn(path, argv, env, **options)

    os.posix_spawnp = posix_spawnp


def install_launches(child_side, launcher_environment: dict[str, str], plan: dict) -> None:
    """In a launcher forked warm: the launch process it starts forked from a zygote.

    The launcher starts `python -u -m LAUNCH_MODULE …` (plan["launch_module"])
    with subprocess.Popen, in its own session and with its standard streams,
    and an environment that is its own but for plan["launch_may_drop"]; such a
    launch is forked, and forks its ranks from a zygote of its own
    (install_launched_ranks). Any other command, and every one after the
    zygote failed, starts as before.
    """
    _LaunchPopen.zygote = _Zygote(_start_zygote(child_side), dict(launcher_environment), child_side)
    _LaunchPopen.plan = plan
    subprocess.Popen = _LaunchPopen


def install_launched_ranks(child_side, launch_environment: dict[str, str], plan: dict) -> None:
    """In a launch process forked warm: each rank it starts with subprocess.Popen forked.

    A rank is `python -u script` (or `-u -m module`) with the launch's
    environment plus torchrun's per-rank names and plan["rank_variables"], in
    the launch's session, with its standard streams or the log file it opened
    for the rank.
    """
    _LaunchedRankPopen.zygote = _Zygote(
        _start_zygote(child_side), dict(launch_environment), child_side
    )
    _LaunchedRankPopen.plan = plan
    subprocess.Popen = _LaunchedRankPopen


def _start_zygote(child_side) -> socket.socket:
    """Fork the zygote, a copy of this process before the command's code runs; this end."""
    parent_end, zygote_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    zygote = os.fork()
    if zygote == 0:
        try:
            parent_end.close()
            _serve(zygote_end, parent, child_side)
        finally:
            os._exit(0)  # never back into the parent's code
    zygote_end.close()
    atexit.register(_stop_zygote, parent_end, zygote)  # reaped by the parent, not left to others
    return parent_end


def _stop_zygote(connection: socket.socket, pid: int) -> None:
    connection.close()  # the zygote sees the end of its requests and exits
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _parameters(function) -> list[str]:
    code = function.__code__
    return list(code.co_varnames[: code.co_argcount])


class _Zygote:
    """The agent's end of the zygote: one request at a time, from torchrun's thread."""

    def __init__(self, connection: socket.socket, environment: dict[str, str], child_side) -> None:
        self.connection = connection
        self.environment = environment
        self.child_side = child_side
        self.broken = False
        self.buffer = b""

    def refusal(
        self, argv: list[str], env: dict[str, str], cwd: str, also: frozenset[str] = frozenset()
    ) -> str | None:
        """Why the rank `argv` cannot be forked (None: it can); `also`: variables besides
        torchrun's per-rank ones that may differ from the agent's."""
        if self.broken:
            return "the zygote failed"
        if len(argv) < 3 or argv[0] != sys.executable or argv[1] != "-u":
            return "not `python -u script` or `python -u -m module`"
        if argv[2] == "-m" and (len(argv) < 4 or argv[3].startswith("-")):
            return "not `python -u -m module`"
        if argv[2] != "-m" and argv[2].startswith("-"):
            return "an interpreter option"
        return self._environment_refusal(env, also) or self._path_refusal([argv[0], *argv[2:]], cwd)

    def launch_refusal(
        self, argv: list[str], env: dict[str, str], cwd: str, plan: dict
    ) -> str | None:
        """Why the launch `python -u -m plan["launch_module"]` cannot be forked (None: it can)."""
        if self.broken:
            return "the zygote failed"
        if (
            len(argv) < 4
            or argv[0] != sys.executable
            or argv[1:4] != ["-u", "-m", plan["launch_module"]]
        ):
            return f"not `python -u -m {plan['launch_module']}`"
        return self._environment_refusal(env, frozenset(plan["launch_may_drop"])) or (
            self._path_refusal([argv[0], *argv[2:]], cwd)
        )

    def agent_refusal(self, argv: list[str], env: dict[str, str], cwd: str) -> str | None:
        """Why the node launcher's agent `argv` cannot be forked (None: it can)."""
        if self.broken:
            return "the zygote failed"
        if len(argv) < 3 or argv[0] != sys.executable or argv[1:3] != ["-m", _AGENT_MODULE]:
            return "not `python -m torch.distributed.run`"
        return self._environment_refusal(env) or self._path_refusal(argv, cwd)

    def _path_refusal(self, command: list[str], cwd: str) -> str | None:
        """Whether the directory the command searches first holds what the server's imports
        found elsewhere (path_lookups.py; its own child would then exit, not run)."""
        recorder = getattr(self.child_side, "_LOOKUP_RECORDER", None)
        lookups_module = getattr(self.child_side, "_PATH_LOOKUPS", None)
        if recorder is None or lookups_module is None:
            return None
        first = lookups_module.searched_first(command, cwd)
        return lookups_module.path_conflict([first], recorder.lookups())

    def _environment_refusal(
        self, env: dict[str, str], also: frozenset[str] | set[str] = frozenset()
    ) -> str | None:
        for name in set(env) | set(self.environment):
            if env.get(name) != self.environment.get(name) and not (
                _per_rank(name) or name in also
            ):
                return f"{name} differs from the agent's"
        return None

    def fork(self, request: dict, descriptors: list[int]) -> int:
        """The forked rank's pid, a child of this process; OSError if the zygote cannot."""
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        message = json.dumps(request).encode() + b"\n"
        try:
            if descriptors:
                socket.send_fds(self.connection, [message], descriptors)
            else:  # an agent: it keeps the launcher's standard streams
                self.connection.sendall(message)
            reply = self._reply()
        finally:
            libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        if "pid" not in reply:
            raise OSError(0, str(reply.get("error", "no pid in the zygote's reply")))
        return int(reply["pid"])

    def _reply(self) -> dict:
        deadline = time.monotonic() + _REPLY_SECONDS
        while b"\n" not in self.buffer:
            self.connection.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = self.connection.recv(65536)
            if not chunk:
                raise OSError(0, "the zygote exited")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)


def _per_rank(name: str) -> bool:
    return name in _RANK_VARIABLES or name.startswith(_RANK_PREFIXES)


class _ForkedRankPopen(subprocess.Popen):
    """A Popen whose child the zygote forks, when it can; otherwise Popen's own fork and exec.

    A forked child is reaped with wait4 and its exit figures written to
    `exits_file` (Popen's poll and wait reap with waitpid, which drops them).
    """

    zygote: _Zygote | None = None
    exits_file: str | None = None
    _exit_note: dict | None = None  # what the exit record adds to wait4's figures
    _role: dict = {}  # what the request adds: a torchrun rank gets a session of its own

    def _execute_child(self, args, executable, *rest):
        # rest: preexec_fn, close_fds, pass_fds, cwd, env, startupinfo, creationflags, shell,
        # p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite, ... (Python 3.10 to 3.13)
        cwd, env = rest[3], rest[4]
        pipes = rest[8:11] + (rest[12],)
        stdout, stderr = rest[11], rest[13]
        zygote = self.zygote
        if zygote is None or isinstance(args, (str, bytes, os.PathLike)):
            return super()._execute_child(args, executable, *rest)
        argv = [os.fsdecode(argument) for argument in args]
        directory = os.fsdecode(cwd) if cwd is not None else os.getcwd()
        if (
            executable is not None
            or env is None
            or any(end != -1 for end in pipes)  # torchrun passes files or nothing
            or self._refusal(zygote, argv, env, directory, rest) is not None
        ):
            return super()._execute_child(args, executable, *rest)
        request = {
            "argv": argv,
            "cwd": directory,
            "env": dict(env),
            "stdout": stdout != -1,
            "stderr": stderr != -1,
            **self._role,
        }
        descriptors = [end for end in (stdout, stderr) if end != -1]
        note = _exit_note(env) if self.exits_file is not None else None
        try:
            self.pid = zygote.fork(request, descriptors)
        except OSError:
            zygote.broken = True
            return super()._execute_child(args, executable, *rest)
        self._child_created = True
        self._exit_note = note

    def _refusal(self, zygote: _Zygote, argv: list[str], env, directory: str, rest) -> str | None:
        """Why this child cannot be forked (None: it can); `rest` as _execute_child's."""
        return zygote.refusal(argv, env, directory)

    # Reaping: Popen's own logic (3.10 to 3.13), with wait4 where it calls waitpid.

    def _try_wait(self, wait_flags):
        """wait() reaps here; callers hold self._waitpid_lock."""
        if self._exit_note is None:
            return super()._try_wait(wait_flags)
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:  # as Popen's: reaped elsewhere, status unknown
            return self.pid, 0
        if pid == self.pid:
            self._write_exit(status, usage)
        return pid, status

    def _internal_poll(self, _deadstate=None, *args, **kwargs):
        """poll() reaps here (Popen's own calls waitpid directly, not _try_wait)."""
        if self._exit_note is None or self.returncode is not None:
            return super()._internal_poll(_deadstate, *args, **kwargs)
        if not self._waitpid_lock.acquire(False):
            return None  # another thread is waiting for it
        try:
            if self.returncode is None:
                pid, status = self._try_wait(os.WNOHANG)
                if pid == self.pid:
                    self._handle_exitstatus(status)
        except OSError:
            if _deadstate is not None:
                self.returncode = _deadstate
        finally:
            self._waitpid_lock.release()
        return self.returncode

    def _write_exit(self, status: int, usage) -> None:
        note, self._exit_note = self._exit_note, None
        try:
            returncode = os.waitstatus_to_exitcode(status)
        except ValueError:  # not an exit (wait4 without WUNTRACED never gives one)
            return
        record = {
            **note,
            "ended": time.monotonic(),
            "pid": self.pid,
            "returncode": returncode,
            "user_seconds": usage.ru_utime,
            "system_seconds": usage.ru_stime,
            "peak_rss_bytes": usage.ru_maxrss * 1024,  # kB on Linux
        }
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        try:  # one write in append mode: the agents of one phase never cut each other's lines
            descriptor = os.open(
                self.exits_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
            )
            try:
                os.write(descriptor, line)
            finally:
                os.close(descriptor)
        except OSError:  # evidence never breaks a run: the check keeps its samples
            pass


class _LaunchPopen(_ForkedRankPopen):
    """subprocess.Popen in a launcher forked warm: its launch process forked (install_launches)."""

    zygote: _Zygote | None = None
    exits_file = None
    plan: dict = {}

    @property
    def _role(self) -> dict:  # the forked launch installs a zygote for its ranks by this plan
        return {"launch": self.plan}

    def _refusal(self, zygote: _Zygote, argv: list[str], env, directory: str, rest) -> str | None:
        standard_streams = (rest[11], rest[13])  # the launch inherits the launcher's
        return (
            _plain_popen_refusal(rest)
            or ("its own standard streams" if standard_streams != (-1, -1) else None)
            or zygote.launch_refusal(argv, env, directory, self.plan)
        )


class _LaunchedRankPopen(_ForkedRankPopen):
    """subprocess.Popen in a launch process forked warm: its ranks forked (install_launched_ranks)."""

    zygote: _Zygote | None = None
    exits_file = None
    plan: dict = {}
    _role = {"same_session": True}

    def _refusal(self, zygote: _Zygote, argv: list[str], env, directory: str, rest) -> str | None:
        return _plain_popen_refusal(rest) or zygote.refusal(
            argv, env, directory, frozenset(self.plan["rank_variables"])
        )


def _plain_popen_refusal(rest) -> str | None:
    """Why a Popen's other options are not the defaults a forked child reproduces (None: they
    are); it stays in its parent's session, as both launchers' Popen leave it.

    `rest` as _execute_child's: preexec_fn, close_fds, pass_fds, …, shell (7),
    restore_signals (14), gid, gids, uid, umask, start_new_session (19), then
    process_group on Python 3.11 and later.
    """
    preexec_fn, close_fds, pass_fds, shell = rest[0], rest[1], rest[2], rest[7]
    restore_signals, gid, gids, uid, umask, start_new_session = rest[14:20]
    process_group = rest[20] if len(rest) > 20 else -1
    if preexec_fn is not None or not close_fds or pass_fds or shell or not restore_signals:
        return "Popen options a forked child does not reproduce"
    if (gid, gids, uid) != (None, None, None) or umask >= 0 or process_group not in (None, -1):
        return "Popen options a forked child does not reproduce"
    if start_new_session:
        return "another session than expected"
    return None


def _exit_note(env) -> dict | None:
    """The rank's identity and start time for its exit record; None without a RANK."""
    try:
        rank = int(env["RANK"])
        local_rank = int(env.get("LOCAL_RANK", rank))
    except (KeyError, TypeError, ValueError):
        return None
    return {"rank": rank, "local_rank": local_rank, "started": time.monotonic()}


def _serve(connection: socket.socket, agent: int, child_side) -> None:
    """The zygote: fork a rank per request until the agent closes its end (or dies)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != agent:
        return
    while True:
        try:
            message, descriptors, _, _ = socket.recv_fds(connection, 1 << 20, 2)
        except OSError:
            return
        if not message:
            return
        request = json.loads(message)
        refusal = _shown_refusal(request["argv"], request["env"], child_side)
        if refusal is not None:
            for descriptor in descriptors:
                os.close(descriptor)
            connection.sendall((json.dumps({"error": refusal}) + "\n").encode())
            continue
        reply = _fork(request, descriptors, agent, connection, child_side)
        if reply is None:  # the rank: it never returns here
            os._exit(127)
        connection.sendall((json.dumps(reply) + "\n").encode())


def _shown_refusal(argv: list[str], environment: dict[str, str], child_side) -> str | None:
    """Why /proc could not show this rank's command and environment (None: it can)."""
    arg_start, arg_end, env_start, env_end = child_side.proc_areas()
    command = sum(len(os.fsencode(argument)) + 1 for argument in argv)
    variables = sum(
        len(os.fsencode(name)) + len(os.fsencode(value)) + 2 for name, value in environment.items()
    )
    if command > arg_end - arg_start or variables > env_end - env_start:
        return "its command or environment is longer than /proc can show for a forked rank"
    return None


def _fork(request: dict, descriptors: list[int], agent: int, connection, child_side) -> dict | None:
    """Fork the rank through a middle process; None in the rank (after it ran), else the reply."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            middle = os.getpid()  # not the rank's getppid(): the agent's if it adopted it already
            rank = os.fork()
            if rank == 0:
                os.close(read_end)
                connection.close()
                if request.get("agent"):
                    _become_agent(request, agent, middle, write_end, child_side)
                if request.get("launch"):
                    _become_launch(request, agent, middle, write_end, child_side)
                _become_rank(request, descriptors, agent, middle, write_end, child_side)
        except BaseException:
            os._exit(127)
        os._exit(0)  # the rank is orphaned now, and adopted by the agent
    os.close(write_end)
    for descriptor in descriptors:
        os.close(descriptor)
    os.waitpid(middle, 0)
    with os.fdopen(read_end, "rb") as status:
        text = status.read().decode()
    pid_line, _, outcome = text.partition("\n")
    if not pid_line.isdigit():
        return {"error": "the forked rank died before it reported its pid"}
    if outcome != "ok":
        return {"error": f"the forked rank could not be set up: {outcome}"}
    return {"pid": int(pid_line)}


def _become_rank(
    request: dict, descriptors: list[int], agent: int, middle: int, write_end: int, child_side
) -> None:
    """Set the rank up as torchrun's Popen(start_new_session=True) would (or a launch
    process's Popen, which leaves it in that process's session), and `python -u`, then run it."""

    def set_up() -> None:
        if not request.get("same_session"):
            os.setsid()
        _wait_for_adoption(agent, middle)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        own = iter(descriptors)
        for wanted, target in ((request["stdout"], 1), (request["stderr"], 2)):
            if wanted:
                descriptor = next(own)
                os.dup2(descriptor, target)
        child_side.close_descriptors(keep=write_end)
        os.chdir(request["cwd"])

    _set_up(write_end, set_up)
    command = _become_unbuffered(request, child_side)
    _run_as_main(command, request["cwd"], child_side)


def _become_launch(request: dict, launcher: int, middle: int, write_end: int, child_side) -> None:
    """Set a launch process up as the launcher's Popen and `python -u` would, with its ranks
    forked warm, then run it: in the launcher's session, with its standard streams."""
    _set_up_in_launchers_session(request["cwd"], launcher, middle, write_end, child_side)
    command = _become_unbuffered(request, child_side)
    install_launched_ranks(child_side, request["env"], request["launch"])
    _run_as_main(command, request["cwd"], child_side)


def _become_unbuffered(request: dict, child_side) -> list[str]:
    """This process as `python -u …` of the request starts; the command child_side runs."""
    argv = request["argv"]
    command = [argv[0], *argv[2:]]  # what child_side runs; -u is set up below
    child_side.become_fresh(command, request["cwd"], request["env"])
    sys.orig_argv = list(argv)
    child_side._show_process(argv, request["env"])
    _unbuffered_standard_streams()
    return command


def _become_agent(request: dict, launcher: int, middle: int, write_end: int, child_side) -> None:
    """Set a node's agent up as posix_spawnp leaves it, then run torchrun with its ranks warm.

    It stays in the launcher's session and process group (the check stops a
    phase by its group) with the launcher's standard streams; every other
    descriptor is closed, as the launcher's own are close-on-exec.
    """
    _set_up_in_launchers_session(request["cwd"], launcher, middle, write_end, child_side)
    argv, environment = request["argv"], request["env"]
    child_side.become_fresh(argv, request["cwd"], environment)
    install(child_side, environment)
    _run_as_main(argv, request["cwd"], child_side)


def _set_up_in_launchers_session(
    cwd: str, launcher: int, middle: int, write_end: int, child_side
) -> None:
    """_set_up for a process its launcher started in its own session and process group, with
    its standard streams: adopted by the launcher, signals unblocked, other descriptors closed."""

    def set_up() -> None:
        _wait_for_adoption(launcher, middle)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        child_side.close_descriptors(keep=write_end)
        os.chdir(cwd)

    _set_up(write_end, set_up)


def _set_up(write_end: int, set_up) -> None:
    """Report this process's pid on the pipe, run `set_up`, then report "ok", or its error
    and exit with status 127 (the zygote's reply to the parent says which)."""
    os.write(write_end, f"{os.getpid()}\n".encode())
    try:
        set_up()
    except OSError as error:
        os.write(write_end, f"{error}".encode())
        os._exit(127)
    os.write(write_end, b"ok")
    os.close(write_end)


def _wait_for_adoption(parent: int, middle: int) -> None:
    """Until the middle process exits and `parent` (a child subreaper then) adopts this one;
    status 127 if another process does (the parent is gone)."""
    deadline = time.monotonic() + _REPARENT_SECONDS
    while os.getppid() == middle and time.monotonic() < deadline:
        time.sleep(0.0002)
    if os.getppid() != parent:
        os._exit(127)


def _run_as_main(command: list[str], cwd: str, child_side) -> None:
    """Run `command`'s script or module as __main__, then end as `python` would."""
    try:
        child_side.run_main(command, cwd)
    except SystemExit as exit:
        child_side.exit_as_fresh(exit.code)
    child_side.exit_as_fresh(None)


def _unbuffered_standard_streams() -> None:
    """sys.stdout and sys.stderr as `python -u` makes them: no buffer, text written through."""
    for name, descriptor in (("stdout", 1), ("stderr", 2)):
        old = getattr(sys, name)
        raw = io.FileIO(descriptor, "w", closefd=False)
        raw.name = f"<{name}>"
        stream = io.TextIOWrapper(
            raw, encoding=old.encoding, errors=old.errors, newline="\n", write_through=True
        )
        stream.mode = "w"
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


__all__ = ["install"]
