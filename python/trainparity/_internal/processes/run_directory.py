"""A check's run directory: marked with its owner, removed afterwards, swept once the owner is gone.

A check that runs children keeps their logs, checkpoints and snapshots under
one run directory: the user's `work_dir` (kept), or a new temporary directory
named `trainparity-process-*` / `trainparity-accum-*` in the temporary root
(and its children's TMPDIR, `trainparity-tmp-*`: children_temporary_directory),
removed when the check ends however it ends, SIGTERM and SIGHUP included
(see termination.py). Only a SIGKILL, a crash of the interpreter or a power
loss can leave one behind, so each temporary run directory holds an owner
marker, `.trainparity-owner`: one JSON object

    {"format": "trainparity-run-owner/1", "pid": 4242, "start_time": 1234567,
     "boot_id": "…", "pid_namespace": "pid:[4026531836]", "host": "node-1"}

(start_time: the process's start in clock ticks after boot, field 22 of
/proc/<pid>/stat; boot_id: /proc/sys/kernel/random/boot_id; pid_namespace:
the link /proc/self/ns/pid; host: the node name). Before creating its own,
a check removes a directory in the same temporary root only when all hold:
its name has one of our prefixes; it is a real directory (not a link) owned
by this user; its marker is a regular file that parses as above; and its
owner is provably gone, i.e. on the same host either the boot id differs
(rebooted since), or in the same pid namespace the pid no longer exists, has
exited (zombie), or belongs to a process with another start time (the pid
was reused). Anything else is left alone: a live owner, a marker from another
host or pid namespace (a shared temporary root), a directory without a valid
marker, one without /proc to judge by, and a user's work_dir, which never
gets a marker.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

__all__ = [
    "ACCUMULATION_PREFIX",
    "CHILDREN_TEMPORARY_PREFIX",
    "OWNER_FILE",
    "PROCESS_RESUME_PREFIX",
    "RUNS_PREFIX",
    "RUN_DIRECTORY_PREFIXES",
    "ProcessIdentity",
    "children_temporary_directory",
    "remove_stale_run_directories",
    "run_directory",
]

PROCESS_RESUME_PREFIX = "trainparity-process-"
ACCUMULATION_PREFIX = "trainparity-accum-"
RUNS_PREFIX = "trainparity-runs-"
CHILDREN_TEMPORARY_PREFIX = "trainparity-tmp-"
RUN_DIRECTORY_PREFIXES = (
    PROCESS_RESUME_PREFIX,
    ACCUMULATION_PREFIX,
    RUNS_PREFIX,
    CHILDREN_TEMPORARY_PREFIX,
)
OWNER_FILE = ".trainparity-owner"
OWNER_FORMAT = "trainparity-run-owner/1"

# A marker is a few hundred bytes; anything larger is not one of ours.
_MAX_MARKER_BYTES = 4096


@dataclass(frozen=True)
class ProcessIdentity:
    """A process, told apart from any later one that reuses its pid (fields: see the module doc)."""

    pid: int
    start_time: int
    boot_id: str
    pid_namespace: str
    host: str

    @classmethod
    def of_this_process(cls) -> ProcessIdentity | None:
        """This process's identity, or None where /proc cannot tell it."""
        try:
            boot_id = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
            pid_namespace = os.readlink("/proc/self/ns/pid")
            start_time, _ = _start_time_and_state("self")
        except (OSError, ValueError):
            return None
        return cls(os.getpid(), start_time, boot_id, pid_namespace, os.uname().nodename)

    def is_gone(self, observer: ProcessIdentity) -> bool:
        """True only when `observer`, a live process, can prove that this process has ended."""
        if self.host != observer.host:
            return False
        if self.boot_id != observer.boot_id:
            return True
        if self.pid_namespace != observer.pid_namespace:
            return False
        try:
            start_time, state = _start_time_and_state(str(self.pid))
        except (FileNotFoundError, ProcessLookupError):
            return True
        except (OSError, ValueError):
            return False  # e.g. /proc mounted with hidepid: we cannot tell
        return start_time != self.start_time or state in ("Z", "X")


def _start_time_and_state(pid: str) -> tuple[int, str]:
    """(start time in clock ticks after boot, state letter) from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    # The command name (field 2) is in parentheses and may itself hold ") ".
    fields = text[text.rindex(")") + 1 :].split()
    return int(fields[19]), fields[0]


def write_owner_marker(directory: Path, owner: ProcessIdentity) -> None:
    record = {"format": OWNER_FORMAT, **asdict(owner)}
    (directory / OWNER_FILE).write_text(json.dumps(record, sort_keys=True) + "\n", encoding="utf-8")


def read_owner_marker(directory: Path) -> ProcessIdentity | None:
    """The owner named by `directory`'s marker; None when there is no valid one."""
    try:
        descriptor = os.open(directory / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        data = os.read(descriptor, _MAX_MARKER_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(descriptor)
    if len(data) > _MAX_MARKER_BYTES:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    expected = {"format": str, "pid": int, "start_time": int, "boot_id": str}
    expected.update(pid_namespace=str, host=str)
    if not isinstance(record, dict) or set(record) != set(expected):
        return None
    for key, kind in expected.items():
        value = record[key]
        if isinstance(value, bool) or not isinstance(value, kind):
            return None
    if record.pop("format") != OWNER_FORMAT or record["pid"] <= 0 or record["start_time"] < 0:
        return None
    return ProcessIdentity(**record)


def remove_stale_run_directories(temporary_root: Path) -> list[Path]:
    """Remove the run directories in `temporary_root` whose owner is provably gone; return them."""
    observer = ProcessIdentity.of_this_process()
    if observer is None:
        return []
    try:
        with os.scandir(temporary_root) as listing:
            entries = list(listing)
    except OSError:
        return []
    removed = []
    for entry in entries:
        if not entry.name.startswith(RUN_DIRECTORY_PREFIXES):
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
            if entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                continue
        except OSError:
            continue
        owner = read_owner_marker(Path(entry.path))
        if owner is None or not owner.is_gone(observer):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


@contextmanager
def run_directory(
    work_dir: Path | None, temporary_root: Path | None, prefix: str
) -> Iterator[tuple[Path, bool]]:
    """(root, managed): the user's `work_dir`, kept; or a new marked temporary directory, removed on exit.

    Creating a temporary one first sweeps stale run directories from the same
    temporary root (`temporary_root`, else the system's).
    """
    if work_dir is not None:
        root = Path(work_dir)
        root.mkdir(parents=True, exist_ok=True)
        # A work_dir that was once a temporary run directory must not be swept as one.
        (root / OWNER_FILE).unlink(missing_ok=True)
        yield root.resolve(), False
        return
    parent = Path(temporary_root) if temporary_root is not None else Path(tempfile.gettempdir())
    parent.mkdir(parents=True, exist_ok=True)
    remove_stale_run_directories(parent)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent)).resolve()
    try:
        owner = ProcessIdentity.of_this_process()
        if owner is not None:
            write_owner_marker(root, owner)
        yield root, True
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def children_temporary_directory(environment: Mapping[str, str]) -> Iterator[Path]:
    """A check's children's TMPDIR: a marked directory in theirs, removed when the check ends.

    It is made where the children would have put their temporary files anyway
    (their TMPDIR when that is a directory, else this process's temporary
    root), one per check: what a child leaves there, and what a child the
    check stops leaves half-made (CPython's tempfile probe, which `import
    torch` runs, creates a file and removes it), go away with the check.
    Marked and swept like a run directory, so a check killed with SIGKILL
    leaves it only until the next check. Not under the run directory:
    multiprocessing makes AF_UNIX sockets in TMPDIR (in each worker of a
    DataLoader that passes tensors), a socket path holds at most 107 bytes,
    and a deep work_dir would pass that (the workers fail and the loader
    waits for the timeout).
    """
    given = environment.get("TMPDIR")
    base = Path(given) if given and Path(given).is_dir() else Path(tempfile.gettempdir())
    with run_directory(None, base, CHILDREN_TEMPORARY_PREFIX) as (directory, _):
        yield directory
