"""The warm server: imports torch once, then forks one child per request of the check that started it.

Run as a script (`python server.py SOCKET_NAME [MODULE ...]`), never
imported: it loads nothing of trainparity, so a forked child's sys.modules
holds nothing of the check. It imports torch (and numpy where present), then
each MODULE (torch's own, such as torch._dynamo, or an installed library's,
named by starter.py for the children that import it anyway: preloads.py), and
runs no torch op, so no thread pool exists and CUDA is never touched (the
server exits, and its children start fresh, where an import loaded CUDA's
driver).

Protocol, one JSON line each way per request on one Unix socket (Linux
abstract namespace) accepted from the server's parent only: "ready" and what
the imports looked up on sys.path (path_lookups.py) once they are done, then
per request {argv, cwd, env, stdout, stderr, warm_ranks, launcher,
trace_filter (hex of a seccomp program: the crash check traces the child, which
waits for its tracer and installs it first, child.await_tracer)}; reply
{forked: pid} as soon as the child exists, then {pid} or {pid, failure: {step,
errno, filename}}; or only {error} when no child was made.

The child is forked twice (server → middle → child) and the middle exits at
once, so the child is reparented to the check, which marks itself a child
subreaper for the request: the check then waits for it as for any child it
spawned (exit status, rusage). The child sets up its process exactly as the C
core's spawn does before exec (own process group, parent-death signal, signals
unblocked, stdin /dev/null, stdout/stderr to files, cwd, other descriptors
closed), reports that on a pipe, and becomes `python script.py …` or `python -m
…` (child.py).
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import json
import os
import signal
import socket
import struct
import sys
import time

_PR_SET_PDEATHSIG = 1
_REPARENT_SECONDS = 10.0  # the middle process exits right after its fork; this is never reached


def _preload(modules: list[str]) -> None:
    """The heavy imports every child would pay for; no op runs, so no thread pool starts."""
    import torch  # noqa: F401

    try:
        import numpy  # noqa: F401
    except ImportError:
        pass
    for module in modules:
        importlib.import_module(module)


def _made_in_temporary_directory() -> tuple[tuple[str, int], ...] | None:
    """None if the imports left tempfile's directory uncomputed; else the directories they made
    in it, with their modes (the server's TMPDIR is its own, empty before the imports)."""
    tempfile = sys.modules.get("tempfile")
    if tempfile is None or tempfile.tempdir is None:
        return None
    made = []
    with os.scandir(tempfile.gettempdir()) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                made.append((entry.name, entry.stat(follow_symlinks=False).st_mode & 0o7777))
    return tuple(sorted(made))


def _load_child_side():
    """child.py, loaded from its file without a sys.modules entry (nothing of trainparity)."""
    module = _load_sibling("child")
    module._OWN_FILES = frozenset(
        {os.path.abspath(__file__), module.__file__, _sibling_path("rank_zygote")}
    )
    return module


def _sibling_path(name: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")


def _load_sibling(name: str):
    """A module beside this file, loaded from it without a sys.modules entry."""
    path = _sibling_path(name)
    spec = importlib.util.spec_from_file_location(f"_trainparity_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _peer_pid(connection: socket.socket) -> int:
    credentials = connection.getsockopt(
        socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")
    )
    return struct.unpack("3i", credentials)[0]


def serve(name: str, modules: list[str]) -> tuple[dict, object] | None:
    """Answer the parent's requests; returns (request, child_side) only in a forked child."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(4)
    path_lookups = _load_sibling("path_lookups")
    recorder = path_lookups.LookupRecorder()
    recorder.install()  # the child uninstalls it (child.become_fresh)
    _preload(modules)
    refusal = _load_sibling("preloads").preloaded_refusal(modules)
    if refusal is not None:
        sys.exit(refusal)  # its last stderr line: why the check starts the children fresh
    child_side = _load_child_side()
    child_side._PATH_LOOKUPS = path_lookups
    child_side._LOOKUP_RECORDER = recorder
    child_side._SERVER_PYTHONPATH = os.environ.get(path_lookups.PATH_VARIABLE, "")
    child_side._SERVER_TEMPORARY = _made_in_temporary_directory()
    # What the imports made is kept out of the children's collections: they neither
    # pay to traverse it nor copy its pages (copy-on-write) by touching it.
    gc.freeze()
    while True:
        connection, _ = listener.accept()
        if _peer_pid(connection) == parent:  # anyone may connect to an abstract name
            break
        connection.close()
    # The imports are done: the check may now adopt children, and knows what they looked up
    # on sys.path (a child whose PYTHONPATH would have found other files needs its own server).
    connection.sendall(b"ready " + json.dumps(recorder.lookups()).encode() + b"\n")
    with connection, connection.makefile("rb") as lines:
        for line in lines:
            request = json.loads(line)
            reply = _fork(request, parent, (listener, connection, lines), child_side)
            if reply is None:  # the child
                return request, child_side
            connection.sendall((json.dumps(reply) + "\n").encode())
    return None  # the check closed its end: it is done


def _fork(request: dict, parent: int, own: tuple, child_side) -> dict | None:
    """Fork the child through a middle process; None in the child, the reply in the server."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    middle = os.fork()
    if middle == 0:
        try:
            # The middle's pid, taken here: the child's own os.getppid() may already be the
            # check's when the middle exits before the child first runs, and the child would
            # then wait the whole _REPARENT_SECONDS for a reparenting that already happened.
            middle = os.getpid()
            child = os.fork()
            if child == 0:
                os.close(read_end)
                _become_child(request, parent, middle, write_end, own, child_side)
                return None
        except BaseException:  # neither the middle nor the child may ever serve
            os._exit(127)
        os._exit(0)  # the child is orphaned now, and adopted by the check
    os.close(write_end)
    os.waitpid(middle, 0)
    with os.fdopen(read_end, "rb") as status:
        pid_line = status.readline().decode().rstrip("\n")
        if not pid_line.isdigit():
            return {"error": "the forked child died before it reported its pid"}
        # The pid first: a check that gives up on the reply kills the child it has adopted.
        own[1].sendall((json.dumps({"forked": int(pid_line)}) + "\n").encode())
        outcome = status.read().decode()
    if outcome == "ok":
        return {"pid": int(pid_line)}
    step, _, detail = (outcome or "fork 0 ").partition(" ")
    number, _, filename = detail.partition(" ")
    failure = {"step": step, "errno": int(number or 0), "filename": filename or None}
    return {"pid": int(pid_line), "failure": failure}


def _become_child(
    request: dict, parent: int, middle: int, write_end: int, own: tuple, child_side
) -> None:
    """Set up the process as spawn does before exec, reporting each failure as spawn would."""
    os.write(write_end, f"{os.getpid()}\n".encode())
    step = "setpgid"
    filename = None
    try:
        os.setpgid(0, 0)
        step = "pdeathsig"
        deadline = time.monotonic() + _REPARENT_SECONDS
        while os.getppid() == middle and time.monotonic() < deadline:
            time.sleep(0.0002)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
        if os.getppid() != parent:  # the check died, or could not adopt us
            os._exit(127)
        step = "signals"
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        for stream, target, path, flags in (
            ("stdin", 0, "/dev/null", os.O_RDONLY),
            ("stdout", 1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
            ("stderr", 2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        ):
            step, filename = stream, path
            descriptor = os.open(path, flags | os.O_CLOEXEC, 0o666)
            os.dup2(descriptor, target)
            os.close(descriptor)
        step, filename = "chdir", request["cwd"]
        os.chdir(request["cwd"])
        step, filename = "close_fds", None
        listener, connection, lines = own
        lines.close()
        connection.close()
        listener.close()
        child_side.close_descriptors(keep=write_end)
    except OSError as error:
        os.write(write_end, f"{step} {error.errno or 0} {filename or ''}".encode())
        os._exit(127)
    os.write(write_end, b"ok")
    os.close(write_end)


def main() -> None:
    # The last argument and TRAINPARITY_WARM_ROOM are room for a child's command and
    # environment in /proc (starter.py).
    os.environ.pop("TRAINPARITY_WARM_ROOM", None)
    forked = serve(sys.argv[1], sys.argv[2:-1])
    if forked is None:
        os._exit(0)  # no finalization of torch and co. in the server: nothing to flush
    request, child_side = forked
    if request.get("trace_filter"):  # a crash check's run: every call of the job is traced
        child_side.await_tracer(bytes.fromhex(request["trace_filter"]))
    child_side.become_fresh(request["argv"], request["cwd"], request["env"])
    if request["warm_ranks"]:  # a torchrun agent (or a launcher): its ranks forked too
        _load_sibling("rank_zygote").install(
            child_side, request["env"], request["argv"], request.get("launcher")
        )
    try:
        child_side.run_main(request["argv"], request["cwd"])
    except SystemExit as exit:
        child_side.exit_as_fresh(exit.code)
    child_side.exit_as_fresh(None)


if __name__ == "__main__":
    main()
