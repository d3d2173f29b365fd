"""The timing loop the benchmark scripts share (imported from their own folder)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(
    action: Callable[[], object],
    repeats: int,
    synchronize: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Median time of `repeats` calls, after one warm-up call: wall time, or `clock`'s.

    `synchronize` (e.g. torch.cuda.synchronize) runs before the clock starts and
    before it stops, so asynchronous GPU work is counted where it is launched.
    `clock=time.process_time` counts the CPU time of all the process's threads,
    which other processes on a loaded machine disturb much less than wall time.
    """
    wait = synchronize or (lambda: None)
    action()
    wait()
    times = []
    for _ in range(repeats):
        wait()
        start = clock()
        action()
        wait()
        times.append(clock() - start)
    return statistics.median(times)
