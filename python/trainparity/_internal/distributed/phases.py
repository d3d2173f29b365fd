"""What check_resume adds around a phase that may be a multi-rank job: environment, sweep, failure text.

torchrun starts its ranks with `start_new_session=True`: they leave the
process group that check_resume kills on timeout, and a rank outlives a
SIGKILLed agent. Every phase therefore carries a tag in its environment
(inherited by the agent, its ranks and their workers); after the phase ends,
`sweep` kills whatever still carries the tag. When a phase fails,
`rank_failure` reads torchrun's own account (the "Root Cause" block on its
stderr) and that rank's last stderr line (from the per-rank logs of
`torchrun_command(log_dir=...)`, or the `[rankN]:` lines of `--tee`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.distributed.nodes import NODES_FILE_VARIABLE
from trainparity._internal.distributed.torchrun_argv import (
    PortRemedy,
    is_torchrun,
    nodes_on_this_host,
    own_port,
)
from trainparity._internal.recording.record_ids import IDS_DIR_VARIABLE

__all__ = [
    "PHASE_TAG_VARIABLE",
    "RANK_EXITS_FILE_VARIABLE",
    "PortRemedy",
    "RankExit",
    "environ_items",
    "ids_path",
    "node_failure",
    "node_rows",
    "own_port",
    "phase_environment",
    "rank_exits_path",
    "rank_failure",
    "reported_rank_exits",
    "sweep",
    "swept",
]

PHASE_TAG_VARIABLE = "TRAINPARITY_PHASE_TAG"
RANK_EXITS_FILE_VARIABLE = "TRAINPARITY_RANK_EXITS_FILE"
"""Where a warm torchrun agent appends each rank's exit figures, one JSON line per rank
(processes/warm/rank_zygote.py writes them, rank_processes.rank_evidence reads them)."""

_ROOT_CAUSE_HEADING = "Root Cause (first observed failure):"
# One failure of torchrun's report (torch.distributed.elastic ChildFailedError.format_msg).
_FAILURE_ENTRY = re.compile(
    r"^\s*rank\s*:\s*(\d+)\s*\(local_rank:\s*(\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)",
    re.MULTILINE,
)
_SWEEP_SECONDS = 2.0
_NODES_FILE = "nodes.json"
_RANK_EXITS_FILE = "rank_exits.jsonl"
_NODE_KEYS = frozenset(
    {
        "node",
        "pid",
        "returncode",
        "elapsed_seconds",
        "user_seconds",
        "system_seconds",
        "peak_rss_bytes",
    }
)


def phase_environment(
    argv: list[str],
    environment: dict[str, str],
    run_dir: Path,
    temporary_dir: Path | None = None,
) -> tuple[dict[str, str], str]:
    """The phase's environment (with its sweep tag and ID record directory) and the tag.

    A torchrun phase's TMPDIR is `temporary_dir` (default: `run_dir`/tmp), and
    its ranks' exit figures go to `rank_exits_path(run_dir)` (warm agents only).
    """
    tag = uuid.uuid4().hex
    phase_env = {**environment, PHASE_TAG_VARIABLE: tag, IDS_DIR_VARIABLE: str(ids_path(run_dir))}
    if is_torchrun(argv):
        # torchrun's mkdtemp(prefix="torchelastic_") for its logs, and anything the
        # ranks put in the temporary root, then go away with the run directory.
        temporary = temporary_dir if temporary_dir is not None else run_dir / "tmp"
        temporary.mkdir(parents=True, exist_ok=True)
        phase_env["TMPDIR"] = str(temporary)
        exits = rank_exits_path(run_dir)
        exits.unlink(missing_ok=True)  # a kept work_dir's last check's
        phase_env[RANK_EXITS_FILE_VARIABLE] = str(exits)
    if nodes_on_this_host(argv) > 1:  # the node launcher writes each agent's row there
        (run_dir / _NODES_FILE).unlink(missing_ok=True)  # a kept work_dir's last check's
        phase_env[NODES_FILE_VARIABLE] = str(run_dir / _NODES_FILE)
    return phase_env, tag


def ids_path(run_dir: Path) -> Path:
    """The directory where a phase's record_ids writes (IDS_DIR_VARIABLE points it there)."""
    return run_dir / "ids"


def rank_exits_path(run_dir: Path) -> Path:
    """The file of a torchrun phase's measured rank exits (see RANK_EXITS_FILE_VARIABLE)."""
    return run_dir / _RANK_EXITS_FILE


def node_failure(run_dir: Path) -> str | None:
    """'node I of N exited with status S' for the agent that ended a multi-node phase, or None.

    The launcher records the agents that ended by themselves; the others it
    stopped after the first failure, so the failed row is the one that did.
    """
    rows = node_rows(run_dir)
    failed = [row for row in rows if row["returncode"] != 0]
    if not failed:
        return None
    row = failed[0]
    return f"node {row['node']} (torchrun agent pid {row['pid']}) exited with status {row['returncode']}"


def node_rows(run_dir: Path) -> list[dict]:
    """The node launcher's row per agent of a multi-node phase (none for other phases)."""
    try:
        rows = json.loads((run_dir / _NODES_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(rows, list):
        return []
    return [row for row in rows if isinstance(row, dict) and set(row) == _NODE_KEYS]


def environ_items(block: bytes) -> list[bytes]:
    """The NAME=value strings of a /proc/PID/environ block, without the NULs that pad it.

    A warm child shows its environment in its server's, NUL-padded to the end of the
    room the server was started with (16 KiB: warm/server_handle.py): split whole, that
    block gave some 16,000 empty strings, and parsing one took 6 ms instead of 0.15.
    """
    return block.rstrip(b"\0").split(b"\0")


def tagged_processes(tag: str) -> list[int]:
    needle = f"{PHASE_TAG_VARIABLE}={tag}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as handle:
                variables = environ_items(handle.read())
        except OSError:  # gone, or another user's
            continue
        if needle in variables:
            found.append(int(entry.name))
    return found


def sweep(tag: str | None) -> int:
    """SIGKILL every process still carrying `tag` (and its group); returns how many were found."""
    if not tag or not os.path.isdir("/proc"):
        return 0
    own_group = os.getpgrp()
    killed: set[int] = set()
    deadline = time.monotonic() + _SWEEP_SECONDS
    while time.monotonic() < deadline:
        survivors = [pid for pid in tagged_processes(tag) if pid != os.getpid()]
        if not survivors:
            break
        for pid in survivors:
            try:
                group = os.getpgid(pid)
                if group != own_group:
                    os.killpg(group, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            killed.add(pid)
        time.sleep(0.02)  # let them die (init reaps them; zombies keep no environ)
    return len(killed)


@contextlib.contextmanager
def swept(tags: Callable[[], list[str]]) -> Iterator[None]:
    """On leaving the block, however it is left, sweep every tag that `tags()` then returns."""
    try:
        yield
    finally:
        for tag in tags():
            sweep(tag)


@dataclass(frozen=True)
class RankExit:
    """A failed rank as torchrun reports it; a negative exitcode is the signal that killed it."""

    rank: int
    local_rank: int
    exitcode: int
    pid: int


def reported_rank_exits(text: str) -> tuple[RankExit, ...]:
    """The failed ranks of torchrun's last failure report in `text`: root cause first, then the others."""
    root_at = text.rfind(_ROOT_CAUSE_HEADING)
    if root_at < 0:
        return ()
    root = _FAILURE_ENTRY.search(text, root_at)
    if root is None:
        return ()
    failures_at = text.rfind("Failures:", 0, root_at)
    others = _FAILURE_ENTRY.finditer(text, failures_at, root_at) if failures_at >= 0 else ()
    return tuple(RankExit(*(int(group) for group in match.groups())) for match in (root, *others))


def rank_failure(stderr_path: Path, rank_log_root: Path) -> str | None:
    """'rank R exited with code C; its last stderr line: ...' from torchrun's report, or None."""
    try:
        text = stderr_path.read_text(errors="replace")
    except OSError:
        return None
    exits = reported_rank_exits(text)
    if not exits:
        return None
    root = exits[0]
    how = (
        f"was killed by signal {-root.exitcode}"
        if root.exitcode < 0
        else f"exited with code {root.exitcode}"
    )
    detail = f"rank {root.rank} {how}"
    line = _last_rank_line(text, root.rank, rank_log_root, str(root.local_rank))
    if line:
        detail += f"; its last stderr line: {line}"
    return detail


def failed_rank_logs(stderr_path: Path, rank_log_root: Path) -> tuple[tuple[int, Path], ...]:
    """Each failed rank torchrun reported (root cause first) with its own stderr log, where kept."""
    try:
        text = stderr_path.read_text(errors="replace")
    except OSError:
        return ()
    logs = []
    for exit in reported_rank_exits(text):
        candidates = _rank_logs(rank_log_root, str(exit.local_rank))
        if candidates:
            logs.append((exit.rank, candidates[-1]))
    return tuple(logs)


def _rank_logs(rank_log_root: Path, local_rank: str) -> list[Path]:
    return sorted(rank_log_root.glob(f"**/attempt_*/{local_rank}/stderr.log"))


def _last_rank_line(text: str, rank: int, rank_log_root: Path, local_rank: str) -> str | None:
    prefix = f"[rank{rank}]:"  # torchrun's --tee prefix, also written into the rank's own log
    candidates = _rank_logs(rank_log_root, local_rank)
    for path in reversed(candidates):
        try:
            lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
        if lines:
            last = lines[-1]
            return (last[len(prefix) :] if last.startswith(prefix) else last).strip()[:500]
    tee_lines = [line[len(prefix) :] for line in text.splitlines() if line.startswith(prefix)]
    tee_lines = [line for line in tee_lines if line.strip()]
    return tee_lines[-1].strip()[:500] if tee_lines else None
