"""In a child forked from the warm server: become what `python script.py`, `-m` or `-c` would be.

Loaded by server.py from its file, never imported as part of trainparity
(the child's sys.modules must hold nothing of the check), so it uses the
standard library only. `become_fresh` redraws the state a fresh interpreter
draws at random; `run_main` runs the command's target in a new `__main__`
with CPython's own exit semantics (SystemExit, an uncaught exception printed
by sys.excepthook and status 1, KeyboardInterrupt re-raised as SIGINT);
`exit_as_fresh` ends the process as a fresh interpreter's finalization would
as far as a program can see, without tearing down what the server imported.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.machinery
import os
import signal
import sys
import types

_OWN_FILES = frozenset()  # set by the server: this file's and its own, kept out of tracebacks
_SERVER_MODULES = frozenset()  # set by become_fresh: what the server imported (not the child's)
# Set by become_fresh: the exit finalizers of the operator libraries the server's imports
# registered with torch's dispatcher (torch.library.Library; torch._dynamo defines about 170).
_SERVER_LIBRARY_FINALIZERS: tuple = ()
# Set by the server: None if its imports never asked tempfile for its directory, else the
# directories (name, mode) they made there.
_SERVER_TEMPORARY: tuple[tuple[str, int], ...] | None = None
# Set by the server: path_lookups.py, loaded from its file; its recorder of what the server's
# imports looked up on sys.path; the PYTHONPATH the server started with ("" for none: else
# the child's own, its directories made absolute against the child's cwd: starter.py).
_PATH_LOOKUPS = None
_LOOKUP_RECORDER = None
_SERVER_PYTHONPATH = ""
# CPython's exit status when flushing the standard streams fails at exit (Py_RunMain).
_FLUSH_FAILED_STATUS = 120


# prctl options and the seccomp mode (linux/prctl.h, linux/seccomp.h).
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_TRACER_SECONDS = 30.0  # the check seizes the child as soon as it has its pid


def await_tracer(program: bytes) -> None:
    """Wait for the crash check's tracer, then install its seccomp `program` (trace.c).

    The check seizes this process (trace_pid) once the server has said it is set
    up. The filter makes each traced call stop for the tracer, and a traced call
    made with no tracer there fails with ENOSYS: so the filter goes in only once
    /proc/self/status shows the tracer. Status 127 when none comes (the check died).
    """
    import ctypes
    import time

    deadline = time.monotonic() + _TRACER_SECONDS
    while _tracer_pid() == 0:
        if time.monotonic() > deadline:
            os.write(2, b"trainparity: the crash check's tracer never attached\n")
            os._exit(127)
        time.sleep(0.0005)

    class _Program(ctypes.Structure):  # struct sock_fprog
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    libc = ctypes.CDLL(None, use_errno=True)
    fprog = _Program(len(program) // 8, program)  # struct sock_filter is 8 bytes
    if (
        libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
        or libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0
    ):
        message = f"trainparity: installing the crash check's seccomp filter failed: errno {ctypes.get_errno()}\n"
        os.write(2, message.encode())
        os._exit(127)


def _tracer_pid() -> int:
    with open("/proc/self/status", "rb") as status:
        for line in status:
            if line.startswith(b"TracerPid:"):
                return int(line.split()[1])
    return 0


def become_fresh(argv: list[str], cwd: str, environment: dict[str, str]) -> None:
    """Environment, argv, sys.path and random state as a fresh interpreter would have them."""
    global _SERVER_MODULES, _SERVER_LIBRARY_FINALIZERS
    _SERVER_MODULES = frozenset(sys.modules)
    _SERVER_LIBRARY_FINALIZERS = _library_finalizers()
    os.environ.clear()  # through putenv/unsetenv: the C library's getenv sees the phase's too
    os.environ.update(environment)
    sys.orig_argv = list(argv)
    if argv[1] == "-m":
        sys.argv = ["-m", *argv[3:]]  # runpy puts the module's file in argv[0], as `python -m`
        sys.path[0] = cwd
    elif argv[1] == "-c":
        sys.argv = ["-c", *argv[3:]]
        sys.path[0] = ""
    else:
        sys.argv = list(argv[1:])
        sys.path[0] = os.path.dirname(os.path.realpath(os.path.join(cwd, argv[1])))
    _put_python_path_on_sys_path(environment)
    importlib.invalidate_caches()  # directory listings the server cached may be stale
    _redo_temporary_directory()
    _redraw_random_state()
    _show_process(argv, environment)


def _put_python_path_on_sys_path(environment: dict[str, str]) -> None:
    """sys.path[1:] as PYTHONPATH makes a fresh interpreter's, where the server started without it.

    A server started with PYTHONPATH has the child's directories already (the
    check gives it them made absolute against the child's cwd). The check forks
    a child only when nothing the server's imports looked up would have been
    found first in its script's directory (or cwd), nor in the directories of
    its PYTHONPATH the server lacks (path_lookups.py); this looks again, in
    case they changed since, and exits with status 127 if so.
    """
    if _LOOKUP_RECORDER is None:
        return
    _LOOKUP_RECORDER.uninstall()
    value = environment.get(_PATH_LOOKUPS.PATH_VARIABLE, "")
    entries = [] if _SERVER_PYTHONPATH else _PATH_LOOKUPS.python_path_entries(value, os.getcwd())
    first = sys.path[0] or os.getcwd()
    conflict = _PATH_LOOKUPS.path_conflict([first, *entries], _LOOKUP_RECORDER.lookups())
    if conflict is not None:
        message = f"trainparity: this warm child cannot start as a fresh one would: {conflict}\n"
        os.write(2, message.encode(errors="replace"))
        os._exit(127)
    if entries:
        sys.path[:] = _PATH_LOOKUPS.fresh_sys_path(sys.path[0], entries, sys.path[1:])


def _show_process(argv: list[str], environment: dict[str, str]) -> None:
    """/proc/PID/cmdline and /proc/PID/environ (ps, pgrep, psutil) show the child's, not the server's.

    The kernel reads both from the strings the server was exec'd with. The
    argument strings are overwritten in place (NUL-separated, NUL-padded),
    or, when the command is longer, as one space-joined string running on
    into the old environment strings (setproctitle's convention). The
    environment is written after that into the old environment strings,
    NUL-padded, when it fits: the check starts each server with room to spare
    (starter.py, _ROOM_VARIABLE); when it does not, /proc keeps showing the
    server's environment. Call after os.environ was replaced: its variables
    then live on the heap, not in that area.
    """
    import ctypes

    arg_start, arg_end, env_start, env_end = proc_areas()
    arguments_room = arg_end - arg_start
    packed = b"\0".join(os.fsencode(argument) for argument in argv) + b"\0"
    if len(packed) <= arguments_room:
        command = packed.ljust(arguments_room, b"\0")
    else:
        room = (env_end if env_start == arg_end else arg_end) - arg_start
        command = b" ".join(os.fsencode(argument) for argument in argv)[: room - 1] + b"\0"
    ctypes.memmove(arg_start, command, len(command))
    free = max(env_start, arg_start + len(command))
    variables = b"".join(
        os.fsencode(name) + b"=" + os.fsencode(value) + b"\0" for name, value in environment.items()
    )
    if free + len(variables) <= env_end:
        shown = variables.ljust(env_end - free, b"\0")
        ctypes.memmove(free, shown, len(shown))


def proc_areas() -> tuple[int, int, int, int]:
    """Where the strings /proc/PID/cmdline and environ show lie: arg_start, arg_end, env_start, env_end."""
    with open("/proc/self/stat", "rb") as handle:
        fields = handle.read().rpartition(b")")[2].split()
    arg_start, arg_end, env_start, env_end = (int(field) for field in fields[45:49])
    return arg_start, arg_end, env_start, env_end


def close_descriptors(keep: int) -> None:
    """Close every descriptor above the standard streams but `keep`, as spawn's close_fds does."""
    for entry in os.listdir("/proc/self/fd"):
        descriptor = int(entry)
        if descriptor > 2 and descriptor != keep:
            try:
                os.close(descriptor)
            except OSError:
                pass  # the directory's own descriptor, already gone


def _redo_temporary_directory() -> None:
    """tempfile's directory, and what the server's imports made in it, under the child's TMPDIR.

    Importing torch asks tempfile for its directory, which tempfile keeps, and
    importing torch._dynamo makes a directory in it (torchinductor_<user>). A
    fresh child does both under its own TMPDIR; the server did them under its
    own (starter.py), so the child does them again, as the import would have.
    """
    if _SERVER_TEMPORARY is None:
        return
    tempfile = sys.modules["tempfile"]
    tempfile.tempdir = None
    directory = tempfile.gettempdir()
    for name, mode in _SERVER_TEMPORARY:
        try:
            os.mkdir(os.path.join(directory, name), mode)
        except OSError:
            pass  # there already (the import would have kept it), or not ours to make


def _redraw_random_state() -> None:
    """What a fresh interpreter seeds from the OS, seeded from the OS again (not inherited)."""
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # the legacy global RandomState, which np.random.rand() uses
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        process.current_process().authkey = os.urandom(32)


def run_main(argv: list[str], cwd: str) -> None:
    """Run the script or module as __main__; return normally only when it completed."""
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = sys.modules["builtins"]
    sys.modules["__main__"] = main
    try:
        if argv[1] == "-m":
            import runpy

            # What `python -m` itself calls: argv[0] set, __main__ replaced by the module.
            runpy._run_module_as_main(argv[2])  # type: ignore[attr-defined]
        elif argv[1] == "-c":
            main.__dict__.update(__loader__=importlib.machinery.BuiltinImporter, __spec__=None)
            exec(compile(argv[2], "<string>", "exec"), main.__dict__)
        else:
            _run_script(main, argv[1], cwd)
    except SystemExit:
        raise  # the interpreter prints its message (if any) and exits with its code
    except BaseException as error:  # as CPython's main does: print, finalize, exit 1
        _print_uncaught(error)
        if isinstance(error, KeyboardInterrupt):
            _exit_by_sigint()
        raise SystemExit(1) from None


def exit_as_fresh(status: object) -> None:
    """End the process as a fresh interpreter does after its main code, then _exit.

    `status` is the code of the SystemExit that ended the main code (None
    when it completed). As Py_RunMain and Py_FinalizeEx would: the SystemExit's
    message printed and its status decided, non-daemon threads joined, atexit
    handlers run (but the server's operator libraries' finalizers, see
    _keep_server_libraries), then what the child itself made released (its __main__ and
    the modules it imported, cleared in reverse import order, and a garbage
    collection: __del__ methods run and unclosed files flush), the standard
    streams flushed (status 120 if that fails). Skipped is the teardown of
    what the server imported (torch, numpy): in a forked child it costs
    several tenths of a second of CPU, copying the server's pages to free
    objects a moment before the process ends.
    """
    code = _exit_status(status)
    threading = sys.modules.get("threading")
    if threading is not None:
        threading._shutdown()  # type: ignore[attr-defined]
    _keep_server_libraries()
    atexit._run_exitfuncs()
    _release_own_objects()
    if not _flushed():
        code = _FLUSH_FAILED_STATUS
    os._exit(code)


def _library_finalizers() -> tuple:
    """The live weakref finalizers that unregister a torch.library.Library's operators."""
    finalize = getattr(sys.modules.get("weakref"), "finalize", None)
    if finalize is None:
        return ()
    return tuple(
        finalizer
        for finalizer, info in list(finalize._registry.items())  # type: ignore[attr-defined]
        if getattr(info.func, "__module__", None) == "torch.library"
        and getattr(info.func, "__name__", None) == "_del_library"
    )


def _keep_server_libraries() -> None:
    """Leave the server's operator libraries registered at exit: teardown of what it imported.

    A fresh interpreter's atexit unregisters each torch.library.Library its imports
    defined (weakref.finalize, atexit=True), after every handler the program
    registered: the dispatcher's own state, in this process only, gone a moment
    later either way. In a forked child that costs about 40 ms of CPU and 8,800
    pages copied (torch._dynamo's libraries): half of what a warm phase costs. The
    libraries the child defined itself are unregistered as in a fresh process.
    """
    for finalizer in _SERVER_LIBRARY_FINALIZERS:
        finalizer.atexit = False


def _exit_status(status: object) -> int:
    """What CPython makes of a SystemExit's code: None 0, an int itself, else printed and 1."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status & 0xFF  # what exit() leaves of it
    try:
        print(status, file=sys.stderr)
    except Exception:
        pass
    return 1


def _release_own_objects() -> None:
    main = sys.modules.get("__main__")
    own = [name for name in sys.modules if name not in _SERVER_MODULES]
    for name in reversed(own):
        module = sys.modules.pop(name, None)
        if isinstance(module, types.ModuleType) and module is not main:
            _clear(module)
    if isinstance(main, types.ModuleType):
        _clear(main)
    gc.collect()


def _clear(module: types.ModuleType) -> None:
    try:
        module.__dict__.clear()
    except Exception:
        pass  # a module whose dict cannot be cleared keeps its objects, as at a fresh exit


def _flushed() -> bool:
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            ok = False
    return ok


def _run_script(main: types.ModuleType, script: str, cwd: str) -> None:
    path = os.path.join(cwd, script)
    with open(path, "rb") as handle:
        source = handle.read()
    filename = os.path.abspath(path)
    main.__dict__.update(
        __file__=filename,
        __cached__=None,
        __loader__=importlib.machinery.SourceFileLoader("__main__", filename),
        __spec__=None,
    )
    exec(compile(source, filename, "exec"), main.__dict__)


def _print_uncaught(error: BaseException) -> None:
    """sys.excepthook on the traceback from the user's first frame, as a fresh run shows it."""
    traceback = error.__traceback__
    while traceback is not None and traceback.tb_frame.f_code.co_filename in _OWN_FILES:
        traceback = traceback.tb_next
    error.__traceback__ = traceback
    sys.last_type, sys.last_value, sys.last_traceback = type(error), error, traceback
    sys.last_exc = error
    sys.excepthook(type(error), error, traceback)


def _exit_by_sigint() -> None:
    """Finalize, then die of SIGINT: a fresh interpreter's end after an uncaught Ctrl-C."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    _keep_server_libraries()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(128 + signal.SIGINT)
