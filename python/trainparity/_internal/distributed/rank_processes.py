"""The evidence rows of a finished torchrun phase's rank processes, one per
rank, for the reports: exit status, CPU time and peak RSS. They are built when
the phase ends from the samples rank_watcher.py took, torchrun's outcome, and
the exits a warm agent measured.

Exit status comes from the phase's outcome, not from sampling: torchrun
exits 0 only when every rank did, and when it fails, its "Root Cause" report
gives the failed ranks' exit codes, and those of the ranks it stopped (-15, SIGTERM);
a rank that exited before the failure is not in it and its exit is unknown.

A warm agent that forks its ranks (processes/warm/rank_zygote.py) reaps each rank
with wait4 and appends what the kernel measured to the phase's rank exits file
(phases.rank_exits_path, read once when the phase ends: `read_rank_exits`):
those rows replace the sampled ones, exactly (`sample_interval_seconds` None),
and a rank too short for any sample still has its row. One JSON object per
line, keys `pid`, `rank`, `local_rank`, `returncode` (negative: killed by that
signal), `user_seconds`, `system_seconds` (the rank's and its reaped
children's), `peak_rss_bytes` (ru_maxrss: the largest of the rank and its
reaped children), `started` and `ended` (time.monotonic() when the agent
started and reaped it; one clock for every process). A rank no sample saw gets
its progress lines from its record when the phase ends
(`unsampled_exit_events`).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from trainparity._internal.distributed.phases import RankExit, reported_rank_exits
from trainparity._internal.distributed.rank_watcher import (
    SAMPLE_INTERVAL_SECONDS,
    RankEvent,
    RankSample,
)

__all__ = [
    "MeasuredExit",
    "RankProcessEvidence",
    "rank_evidence",
    "rank_event_detail",
    "read_rank_exits",
    "unsampled_exit_events",
]


@dataclass(frozen=True)
class RankProcessEvidence:
    """One rank's process of a finished phase: its exit status and sampled resource use.

    `returncode` is None when unknown (a rank torchrun stopped after another
    failed); negative means killed by that signal, as torchrun reports it.
    The resource figures are None for a rank known only from torchrun's
    report; otherwise they come from samples taken every
    `sample_interval_seconds` (see rank_watcher.py's docstring for what may
    be missing), or, where that is None, from the agent's wait4 at the rank's exit.
    """

    rank: int
    local_rank: int
    pid: int
    returncode: int | None
    user_seconds: float | None
    system_seconds: float | None
    peak_rss_bytes: int | None
    sample_interval_seconds: float | None = SAMPLE_INTERVAL_SECONDS

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def rank_evidence(
    samples: Sequence[RankSample],
    *,
    phase_returncode: int | None,
    stderr_path: Path,
    measured: Mapping[int, MeasuredExit] | None = None,
) -> tuple[RankProcessEvidence, ...]:
    """Evidence rows of a finished phase's ranks, sorted by rank then start.

    `samples` is what `RankWatcher.close` returned for the phase,
    `phase_returncode` how torchrun ended (None when it timed out), and
    `stderr_path` torchrun's stderr, read only when it failed. A rank in
    `measured` (the phase's rank exits file, read by `read_rank_exits`) gets its
    measured row instead of its samples.
    """
    measured = measured or {}
    ordered = sorted(samples, key=lambda sample: (sample.rank, sample.first_seen))
    if phase_returncode == 0:
        # With restarts a rank has one process per attempt; only the last one's exit is known.
        last_of_rank = {sample.rank: sample.pid for sample in ordered}
        exits: dict[int, RankExit] = {}
    else:
        try:
            text = stderr_path.read_text(errors="replace") if phase_returncode is not None else ""
        except OSError:
            text = ""
        exits = {failure.pid: failure for failure in reported_rank_exits(text)}
    keyed: list[tuple[tuple[int, float], RankProcessEvidence]] = [
        ((exit.row.rank, exit.started), exit.row) for exit in measured.values()
    ]
    for sample in ordered:
        if sample.pid in measured:
            continue
        if phase_returncode == 0:
            returncode = 0 if last_of_rank[sample.rank] == sample.pid else None
        else:
            returncode = exits[sample.pid].exitcode if sample.pid in exits else None
        keyed.append(((sample.rank, sample.first_seen), _row(sample, returncode)))
    seen = {sample.pid for sample in ordered} | set(measured)
    keyed += [
        (
            (failure.rank, math.inf),
            RankProcessEvidence(
                failure.rank, failure.local_rank, pid, failure.exitcode, None, None, None
            ),
        )
        for pid, failure in exits.items()
        if pid not in seen
    ]
    return tuple(row for _, row in sorted(keyed, key=lambda item: item[0]))


def unsampled_exit_events(
    phase: str, samples: Sequence[RankSample], measured: Mapping[int, MeasuredExit]
) -> tuple[RankEvent, ...]:
    """A start and an end event for each measured rank that no sample saw, in start order."""
    sampled = {sample.pid for sample in samples}
    events = []
    for exit in sorted(measured.values(), key=lambda exit: exit.started):
        if exit.row.pid in sampled:
            continue
        row = exit.row
        sample = RankSample(
            phase, row.rank, row.local_rank, row.pid, row.user_seconds or 0.0,
            row.system_seconds or 0.0, row.peak_rss_bytes or 0, exit.started, exit.ended, True,
        )  # fmt: skip
        events += [RankEvent("start", sample, True), RankEvent("end", sample, True)]
    return tuple(events)


class MeasuredExit(NamedTuple):
    """One rank's exit as its warm agent measured it: its row, and its start and end
    (the monotonic clock)."""

    row: RankProcessEvidence
    started: float
    ended: float


def read_rank_exits(path: Path | None) -> dict[int, MeasuredExit]:
    """A phase's rank exits file's rows by pid ({} for None); lines it cannot read are skipped.

    Read once when the phase ends: its progress lines and its report rows come from it.
    """
    if path is None:  # not a torchrun phase: no file to read
        return {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:  # none written: a fresh agent, or no rank reaped
        return {}
    measured = {}
    for line in lines:
        try:
            record = json.loads(line)
            row = RankProcessEvidence(
                rank=int(record["rank"]),
                local_rank=int(record["local_rank"]),
                pid=int(record["pid"]),
                returncode=int(record["returncode"]),
                user_seconds=float(record["user_seconds"]),
                system_seconds=float(record["system_seconds"]),
                peak_rss_bytes=int(record["peak_rss_bytes"]),
                sample_interval_seconds=None,
            )
            measured[row.pid] = MeasuredExit(row, float(record["started"]), float(record["ended"]))
        except (ValueError, TypeError, KeyError):  # a line cut short by a killed agent
            continue
    return measured


def _row(sample: RankSample, returncode: int | None) -> RankProcessEvidence:
    return RankProcessEvidence(
        sample.rank,
        sample.local_rank,
        sample.pid,
        returncode,
        sample.user_seconds,
        sample.system_seconds,
        sample.peak_rss_bytes,
    )


def rank_event_detail(event: RankEvent) -> str:
    """What a progress line adds about a rank: `pid 4242`, or `pid 4242, 0.31 CPU s, peak RSS …, sampled`
    (`measured at exit` for a measured rank's end)."""
    sample = event.sample
    if event.kind == "start":
        return f"pid {sample.pid}"
    cpu = sample.user_seconds + sample.system_seconds
    return (
        f"pid {sample.pid}, {cpu:.2f} CPU s, "
        f"peak RSS {sample.peak_rss_bytes / (1 << 20):.0f} MiB, "
        + ("measured at exit" if event.measured else "sampled")
    )
