"""One run of a job under the native tracer (src/_trainparity/trace.c): its file-system calls.

The crash check runs every job this way: the tracer reports each mutation
the job's processes and threads make under one directory (write, pwrite,
writev, ftruncate, fsync, fdatasync, rename, unlink, mkdir, close, creating
or truncating open, ...), numbered in the order it saw them, and can SIGKILL
the process that is about to make mutation number `kill_at` (before the call
runs). `observe_opens` adds the regular files opened for reading there:
what a restarted job loaded.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.native.core import core
from trainparity._internal.processes.group import ChildSpec
from trainparity._internal.processes.warm.server_handle import kill_and_reap
from trainparity._internal.processes.warm.starter import ChildStarter

__all__ = ["FsEvent", "TracedRun", "TracingUnavailable", "run_traced", "tracing_available"]

# The operations that change no byte and no name: a crash just before one of them leaves
# the same disk image as a crash just after the mutation before it (process crash).
IMAGE_NEUTRAL = frozenset({"close", "fsync", "fdatasync", "open"})


class TracingUnavailable(RuntimeError):
    """The tracer cannot run here (another OS or architecture, or ptrace forbidden)."""


def tracing_available() -> bool:
    return bool(getattr(core, "TRACE_SUPPORTED", 0))


@dataclass(frozen=True)
class FsEvent:
    """One traced call. `seq` numbers the mutations (-1 for a read); paths are below the root."""

    seq: int
    time_ns: int
    pid: int
    op: str
    path: str
    target: str | None  # a rename's or link's destination
    offset: int  # -1 when it does not apply
    length: int  # -1 when it does not apply
    killed: bool  # the job was killed just before this call
    copied: bool  # a fsync whose file's bytes were copied (copy_dir)

    def changes_image(self) -> bool:
        """Whether the call changes a byte or a name under the root (a zero-length write does not)."""
        return self.op not in IMAGE_NEUTRAL and not (
            self.op in ("write", "pwrite", "writev") and self.length == 0
        )

    def describe(self) -> str:
        """`write ckpts/step_4.pt @4096+788`, `rename ckpts/a.tmp -> ckpts/a`."""
        text = f"{self.op} {self.path or '.'}"
        if self.target is not None:
            text += f" -> {self.target or '.'}"
        if self.offset >= 0 and self.length >= 0:
            text += f" @{self.offset}+{self.length}"
        elif self.length >= 0:
            text += f" to {self.length} bytes"
        return text


@dataclass(frozen=True)
class TracedRun:
    returncode: int | None
    signal: int | None
    timed_out: bool
    killed: bool
    wall_seconds: float
    events: tuple[FsEvent, ...]

    @property
    def mutations(self) -> tuple[FsEvent, ...]:
        return tuple(event for event in self.events if event.seq >= 0)

    @property
    def reads(self) -> tuple[FsEvent, ...]:
        return tuple(event for event in self.events if event.seq < 0)


def run_traced(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path,
    stdout_path: Path,
    stderr_path: Path,
    root: Path,
    kill_at: int | None = None,
    copy_dir: Path | None = None,
    observe_opens: bool = False,
    timeout: float = 300.0,
    starter: ChildStarter | None = None,
    name: str = "job",
) -> TracedRun:
    """Run `argv` to its end under the tracer (OSError if it cannot start; see TracedRun).

    With a warm `starter`, the job is forked from its warm server (torch imported
    once) and seized there, where the starter allows (its report says why not);
    else it is forked and exec'd here. Either way every call it makes is traced.
    """
    if not tracing_available():
        raise TracingUnavailable(
            "the crash check's tracer needs Linux on x86-64 or AArch64 (ptrace and seccomp)"
        )
    options = {
        "kill_at": -1 if kill_at is None else kill_at,
        "copy_dir": None if copy_dir is None else os.fsencode(copy_dir),
        "observe_opens": observe_opens,
        "timeout": float(timeout),
    }
    root_bytes = os.fsencode(os.path.realpath(root))
    result = None
    if starter is not None:
        spec = ChildSpec(
            name=name,
            argv=tuple(argv),
            cwd=cwd,
            env=dict(env),
            stdout_path=stdout_path,
            stderr_path=stderr_path,
        )
        pid = starter.warm_fork(spec, trace_filter=core.trace_filter())
        if pid is not None:
            try:
                result = core.trace_pid(pid, root_bytes, **options)
            except OSError:
                kill_and_reap(pid)  # it waits for its tracer: nothing of the job ran
                raise
    if result is None:
        program = _program(argv[0], env, cwd)
        result = core.trace_job(
            [os.fsencode(program), *(os.fsencode(word) for word in argv[1:])],
            [os.fsencode(f"{key}={value}") for key, value in env.items()],
            os.fsencode(cwd),
            os.fsencode(stdout_path),
            os.fsencode(stderr_path),
            root_bytes,
            **options,
        )
    if result["copy_errno"]:
        raise OSError(result["copy_errno"], "copying a file at its fsync failed")
    return TracedRun(
        returncode=result["returncode"],
        signal=result["signal"],
        timed_out=result["timed_out"],
        killed=result["killed"],
        wall_seconds=result["wall_seconds"],
        events=tuple(FsEvent(*event) for event in result["events"]),
    )


def _program(word: str, env: Mapping[str, str], cwd: Path) -> str:
    """The absolute path of the program the first word names (PATH as the child sees it)."""
    if "/" in word:
        return str((cwd / word).resolve()) if not os.path.isabs(word) else word
    found = shutil.which(word, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(f"{word!r} is not found on the job's PATH")
    return os.path.abspath(found)
