"""The live sampler of torchrun phases' ranks, which finds them in /proc while a phase runs.

`RankWatcher` samples on a daemon thread and keeps what the last sample saw of
each rank (pid, CPU time, peak RSS); rank_processes.py turns a finished phase's
samples into its evidence rows.

A phase's child is torchrun's agent; its ranks are grandchildren that the
agent starts in their own sessions and reaps itself, so their exit status and
resource use never reach our wait4. `RankWatcher` samples /proc instead: a
rank is a process whose environment carries a watched phase tag and `RANK`,
and whose parent carries the same tag without `RANK` (the agent). That
excludes the ranks' DataLoader workers and subprocesses, which inherit `RANK`
from a rank, and orphans, whose parent is then init.

The figures are those of the last sample before the rank exited, taken every
`SAMPLE_INTERVAL_SECONDS`: up to one interval of CPU time and any growth of
the peak RSS in that last interval may be missing (a sample that finds the
rank already exited but not yet reaped reads its final CPU time). CPU time
includes the rank's reaped children (cutime/cstime), as wait4 does for the
phase's child; peak RSS (VmHWM) is the rank's own. A rank that lived less
than one interval may never be seen; when it failed, torchrun's report still
names it (`rank_evidence` adds it without resource figures).
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from trainparity._internal.distributed.phases import PHASE_TAG_VARIABLE, environ_items
from trainparity._internal.distributed.torchrun_argv import is_torchrun

__all__ = [
    "SAMPLE_INTERVAL_SECONDS",
    "RankEvent",
    "RankSample",
    "RankWatcher",
]

SAMPLE_INTERVAL_SECONDS = 0.1
_STOP_SECONDS = 2.0
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_TAG_PREFIX = f"{PHASE_TAG_VARIABLE}=".encode()
# How many samples a PID whose environment reads empty is looked at again before it is taken
# as untagged: a process in the middle of its exec reads empty for a moment; a zombie or a
# kernel thread reads empty for good, so the number is small.
_EMPTY_ENVIRONMENT_SAMPLES = 5


@dataclass(frozen=True)
class RankSample:
    """What the last sample saw of one rank's process (times from `time.monotonic()`).

    `ended` is True once the rank was seen exited (gone, or a zombie).
    """

    phase: str
    rank: int
    local_rank: int
    pid: int
    user_seconds: float
    system_seconds: float
    peak_rss_bytes: int
    first_seen: float
    last_seen: float
    ended: bool = False


@dataclass(frozen=True)
class RankEvent:
    """A rank's process was first seen (`kind` "start") or seen exited ("end").

    `measured`: the figures are the agent's wait4 at the rank's exit (a rank
    no sample saw, reported when its phase ended), not a sample.
    """

    kind: str
    sample: RankSample
    measured: bool = False


RankCallback = Callable[[RankEvent], None]


class RankWatcher:
    """Samples the ranks of the torchrun phases it watches, on a daemon thread.

    `watch` a phase before starting its child and `close` it once the child
    was reaped (before sweeping its tag): `close` takes a last sample and
    returns the phase's `RankSample`s. `on_event` is called on the watcher's
    thread (or in `close`) when a rank is first seen and when it is seen
    exited; it must be quick and must not call the watcher. If it raises, it
    is not called again and `stop` raises that exception. The thread scans /proc only while a phase
    is watched; reading a process's environment once per new PID keeps a
    sample cheap (one listing of /proc, two small reads per live rank).
    """

    def __init__(self, on_event: RankCallback | None = None) -> None:
        self._on_event = on_event
        self._callback_error: BaseException | None = None
        # One lock for the scan and the events it emits, so events come in order.
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._phase_of_tag: dict[str, str] = {}
        # PIDs whose environment was read and need not be again (see _scan).
        self._resolved: set[int] = set()
        # PIDs whose environment read empty, and how many times so far.
        self._empty_reads: dict[int, int] = {}
        self._live: dict[int, _LiveRank] = {}
        self._ended: dict[str, list[RankSample]] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None

    def __enter__(self) -> RankWatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def watch(self, phase: str, tag: str, argv: Sequence[str]) -> bool:
        """Sample `phase`'s ranks if `argv` launches torchrun; whether it does."""
        if not is_torchrun(argv):
            return False
        with self._wake:
            if self._stopping:
                raise RuntimeError("RankWatcher was stopped")
            if phase in self._phase_of_tag.values():
                raise ValueError(f"{phase} is already watched")
            self._phase_of_tag[tag] = phase
            self._ended[tag] = []
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="trainparity-rank-watcher", daemon=True
                )
                self._thread.start()
            self._wake.notify()
        return True

    def close(self, phase: str) -> tuple[RankSample, ...]:
        """Stop watching `phase`; its ranks as last sampled (none if it was not watched)."""
        with self._lock:
            tag = next((tag for tag, name in self._phase_of_tag.items() if name == phase), None)
            if tag is None:
                return ()
            self._scan_safely()
            samples = self._ended.pop(tag)
            for pid in [pid for pid, live in self._live.items() if live.tag == tag]:
                samples.append(self._live.pop(pid).sample)
            del self._phase_of_tag[tag]
            if not self._phase_of_tag:
                # Idle from now on: PIDs cached now may be reused before the next phase.
                self._resolved.clear()
                self._empty_reads.clear()
        return tuple(sorted(samples, key=lambda sample: (sample.rank, sample.first_seen)))

    def stop(self) -> None:
        """End the thread (waiting up to 2 s); raise what `on_event` raised, if it did."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(_STOP_SECONDS)
        if self._callback_error is not None:
            error, self._callback_error = self._callback_error, None
            raise error

    # The thread ---------------------------------------------------------------------

    def _run(self) -> None:
        with self._wake:
            while not self._stopping:
                if not self._phase_of_tag:
                    self._wake.wait()
                    continue
                self._scan_safely()
                self._wake.wait(SAMPLE_INTERVAL_SECONDS)

    def _scan_safely(self) -> None:
        try:
            self._scan()
        except Exception:  # evidence must never break a check: the next sample tries again
            pass

    def _scan(self) -> None:
        now = time.monotonic()
        try:
            pids = {int(name) for name in os.listdir("/proc") if name.isdigit()}
        except OSError:
            return
        self._resolved &= pids  # a PID that went away may come back as another process
        self._empty_reads = {pid: count for pid, count in self._empty_reads.items() if pid in pids}
        for pid in pids - self._resolved:
            known = _read_identity(pid)
            if known is None:
                # Read again next time: a rank caught in the middle of its exec shows no
                # environment yet, and taking it as untagged would lose it for good.
                count = self._empty_reads.get(pid, 0) + 1
                if count < _EMPTY_ENVIRONMENT_SAMPLES:
                    self._empty_reads[pid] = count
                    continue
                known = _UNTAGGED
            self._empty_reads.pop(pid, None)
            if known.tag is not None and known.rank is None:
                # Read again next time: a rank between torchrun's fork and its exec
                # still has the agent's environment.
                continue
            self._resolved.add(pid)
            if known.rank is not None and known.tag in self._phase_of_tag:
                stat = self._rank_stat(pid, known)
                if stat is not None:
                    self._start(pid, known, stat, now)
        for pid, live in list(self._live.items()):
            self._sample(pid, live, now)

    def _rank_stat(self, pid: int, known: _Known) -> _Stat | None:
        """The process's stat if it is a rank: its parent carries its tag without RANK."""
        stat = _read_stat(pid)
        if stat is None:
            return None
        # Read afresh: we may have cached the agent's environment from before its exec.
        parent = _read_identity(stat.parent_pid)
        is_rank = parent is not None and parent.tag == known.tag and parent.rank is None
        return stat if is_rank else None

    def _start(self, pid: int, known: _Known, stat: _Stat, now: float) -> None:
        assert known.tag is not None and known.rank is not None
        sample = RankSample(
            phase=self._phase_of_tag[known.tag],
            rank=known.rank,
            local_rank=known.local_rank if known.local_rank is not None else known.rank,
            pid=pid,
            user_seconds=stat.user_seconds,
            system_seconds=stat.system_seconds,
            peak_rss_bytes=_read_peak_rss(pid) or 0,
            first_seen=now,
            last_seen=now,
        )
        self._live[pid] = _LiveRank(known.tag, stat.start_ticks, sample)
        self._emit("start", sample)

    def _sample(self, pid: int, live: _LiveRank, now: float) -> None:
        stat = _read_stat(pid)
        if stat is None or stat.start_ticks != live.start_ticks:
            self._end(pid)
            return
        peak = _read_peak_rss(pid)  # None for a zombie: its memory is gone
        live.sample = dataclasses.replace(
            live.sample,
            user_seconds=stat.user_seconds,
            system_seconds=stat.system_seconds,
            peak_rss_bytes=max(live.sample.peak_rss_bytes, peak or 0),
            last_seen=now,
        )
        if stat.state == "Z":  # exited, not yet reaped by torchrun: its CPU time is final
            self._end(pid)

    def _end(self, pid: int) -> None:
        live = self._live.pop(pid)
        ended = dataclasses.replace(live.sample, ended=True)
        self._ended[live.tag].append(ended)
        self._emit("end", ended)

    def _emit(self, kind: str, sample: RankSample) -> None:
        if self._on_event is None or self._callback_error is not None:
            return
        try:
            self._on_event(RankEvent(kind, sample))
        except Exception as error:  # re-raised by stop(), on the caller's thread
            self._callback_error = error


# Reading /proc --------------------------------------------------------------------


class _Known(NamedTuple):
    """What a PID's environment says: its phase tag, RANK and LOCAL_RANK, where set."""

    tag: str | None
    rank: int | None
    local_rank: int | None


class _Stat(NamedTuple):
    state: str
    parent_pid: int
    user_seconds: float
    system_seconds: float
    start_ticks: int


@dataclass
class _LiveRank:
    tag: str
    start_ticks: int  # tells a reused PID from the rank
    sample: RankSample


_UNTAGGED = _Known(None, None, None)


def _read_identity(pid: int) -> _Known | None:
    """What `pid`'s environment says; None when it reads empty (not known yet: see _scan)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:  # gone, or another user's
        return _UNTAGGED
    if not environ:  # mid-exec (the new image's environment is not set up yet), zombie, kthread
        return None
    if _TAG_PREFIX not in environ:
        return _UNTAGGED
    variables = dict(item.split(b"=", 1) for item in environ_items(environ) if b"=" in item)
    tag = variables.get(_TAG_PREFIX[:-1], b"").decode(errors="replace")
    return _Known(
        tag or None, _integer(variables.get(b"RANK")), _integer(variables.get(b"LOCAL_RANK"))
    )


def _integer(value: bytes | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _read_stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read()
        # The command name may hold spaces and parentheses: fields start after the last ')'.
        fields = text[text.rindex(b")") + 2 :].split()
        utime, stime, cutime, cstime = (int(value) for value in fields[11:15])
        return _Stat(
            state=fields[0].decode(),
            parent_pid=int(fields[1]),
            user_seconds=(utime + cutime) / _CLOCK_TICKS,
            system_seconds=(stime + cstime) / _CLOCK_TICKS,
            start_ticks=int(fields[19]),
        )
    except (OSError, ValueError, IndexError):
        return None


def _read_peak_rss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024  # in kB
    except (OSError, ValueError, IndexError):
        pass
    return None
