"""The timing loop the benchmark scripts share (imported from their own folder)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(
    action: Callable[[], object], repeats: int, synchronize: Callable[[], object] | None = None
) -> float:
    """Median wall time of `repeats` calls, after one warm-up call.

    `synchronize` (e.g. torch.cuda.synchronize) runs before the clock starts and
    before it stops, so asynchronous GPU work is counted where it is launched.
    """
    wait = synchronize or (lambda: None)
    action()
    wait()
    times = []
    for _ in range(repeats):
        wait()
        start = time.perf_counter()
        action()
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
