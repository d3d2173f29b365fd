"""The crash points of a job, from one traced uninterrupted run: where, in time order, and which
of them leave the same disk image.

A step point kills the job right after record(K) (recording/crash_hook.py);
a save point kills it just before mutation number N under its checkpoint
location (processes/traced_job.py). A crash just before a call that changes
no byte and no name (close, fsync, a zero-length write) leaves the disk as a
crash just after the call before it: under a process crash, points are
grouped by how many image-changing calls ran before them, and each group is
run once (`image_class`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainparity._internal.processes.traced_job import FsEvent

__all__ = ["CrashPoint", "crash_points", "read_step_log", "spread"]

STEPS, SAVES = "steps", "saves"


@dataclass(frozen=True)
class CrashPoint:
    """One place the job is killed. `after_step`: the last step recorded before it (None: none yet)."""

    kind: str  # "step" | "save" | "end"
    time_ns: int
    after_step: int | None
    image_class: int  # image-changing mutations that ran before it
    event: FsEvent | None = None  # a save point's call, which does not run

    @property
    def seq(self) -> int | None:
        return None if self.event is None else self.event.seq

    @property
    def name(self) -> str:
        """`after step 3`; `save #12 write ckpts/step_4.pt @0+4096 (after step 4)`."""
        if self.kind == "end":
            return f"after the end (step {self.after_step}, every save done)"
        if self.event is None:
            return f"after step {self.after_step}"
        where = (
            "before the first step" if self.after_step is None else f"after step {self.after_step}"
        )
        return f"save #{self.event.seq} {self.event.describe()} ({where})"


def read_step_log(path: Path) -> list[tuple[int, int]]:
    """(step, monotonic ns) of each record() call of the lowest rank, in order ([] if none)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    rows = [line.split() for line in text.splitlines() if line.strip()]
    parsed = [(int(rank), int(step), int(when)) for rank, step, when in rows]
    if not parsed:
        return []
    lowest = min(rank for rank, _, _ in parsed)
    return [(step, when) for rank, step, when in parsed if rank == lowest]


def crash_points(
    kinds: Iterable[str], events: Sequence[FsEvent], steps: Sequence[tuple[int, int]]
) -> list[CrashPoint]:
    """Every crash point of the asked kinds, in time order.

    Step points: after each step's first record() but the last step's, and
    the end: every call made, the job about to exit. Save points: before each
    traced mutation.
    """
    wanted = set(kinds)
    mutations = sorted((event for event in events if event.seq >= 0), key=lambda e: e.seq)
    changing_times = [event.time_ns for event in mutations if event.changes_image()]
    points: list[CrashPoint] = []
    if STEPS in wanted:
        first_records: dict[int, int] = {}
        for step, when in steps[:-1]:
            first_records.setdefault(step, when)  # the job dies at the first record() of a step
        for step, when in first_records.items():
            done = sum(1 for time in changing_times if time < when)
            points.append(CrashPoint("step", when, step, done))
    if SAVES in wanted:
        done = 0
        for event in mutations:
            points.append(
                CrashPoint("save", event.time_ns, _step_before(steps, event.time_ns), done, event)
            )
            done += event.changes_image()
    if STEPS in wanted and steps:
        # Killed after its last save, before it exits (or restarted once finished): the
        # restart must see that nothing is left to do.
        last = max([when for _, when in steps] + [event.time_ns for event in mutations])
        points.append(CrashPoint("end", last + 1, steps[-1][0], len(changing_times)))
    points.sort(key=lambda point: (point.time_ns, point.kind != "step"))
    return points


def spread(points: Sequence[CrashPoint], max_points: int | None) -> list[CrashPoint]:
    """At most `max_points` points, spread evenly over time; always kept: each save's first
    and last write, each rename and each fsync (a save being the calls between two steps),
    and the end.

    When the kept ones alone exceed the budget they are all run (the report says so).
    """
    if max_points is None or len(points) <= max_points:
        return list(points)
    kept = set(_always_kept(points))
    room = max_points - len(kept)
    others = [index for index in range(len(points)) if index not in kept]
    if room > 0 and others:
        stride = len(others) / room
        kept.update(others[int(position * stride)] for position in range(min(room, len(others))))
    return [points[index] for index in sorted(kept)]


def _always_kept(points: Sequence[CrashPoint]) -> list[int]:
    kept: list[int] = []
    by_save: dict[int | None, list[int]] = {}
    for index, point in enumerate(points):
        if point.kind == "end":
            kept.append(index)  # a finished job restarted: one point, often a finding
        if point.event is None:
            continue
        if point.event.op in ("rename", "fsync", "fdatasync"):
            kept.append(index)
        if point.event.op in ("write", "pwrite", "writev"):
            by_save.setdefault(point.after_step, []).append(index)
    for writes in by_save.values():
        kept.extend((writes[0], writes[-1]))
    return sorted(set(kept))


def _step_before(steps: Sequence[tuple[int, int]], time_ns: int) -> int | None:
    before = None
    for step, when in steps:
        if when >= time_ns:
            break
        before = step
    return before
