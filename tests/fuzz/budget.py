"""How long the fuzzers run, and the guard that turns a hang into a test failure.

`make test` runs every fuzzer with a small, fixed (derandomized) number of
examples, so CI stays reproducible and fast; `make fuzz` sets
TRAINPARITY_FUZZ_EXAMPLES and runs each with that many random examples
(failures are kept in .hypothesis/ and replayed first on the next run).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator

from hypothesis import HealthCheck, settings

EXAMPLES_VARIABLE = "TRAINPARITY_FUZZ_EXAMPLES"
LONG_EXAMPLES = int(os.environ.get(EXAMPLES_VARIABLE) or 0)
# One input that takes longer than this is a hang, not slowness: inputs are a few KB.
EXAMPLE_SECONDS = 30.0


def fuzz_settings(ci_examples: int) -> settings:
    """`ci_examples` fixed examples under `make test`; TRAINPARITY_FUZZ_EXAMPLES random ones under `make fuzz`."""
    return settings(
        max_examples=LONG_EXAMPLES or ci_examples,
        derandomize=not LONG_EXAMPLES,
        deadline=None,  # a loaded CI machine is slow, not wrong; within_seconds catches hangs
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


class Hang(AssertionError):
    """One fuzz input ran past EXAMPLE_SECONDS."""


@contextlib.contextmanager
def within_seconds(seconds: float = EXAMPLE_SECONDS) -> Iterator[None]:
    """Fail with Hang when the block runs longer than `seconds` (SIGALRM; main thread only).

    The alarm also interrupts a blocking open() or read(), such as a FIFO
    without a writer, since the handler raises.
    """

    def expired(signum, frame):
        raise Hang(f"the input was still being processed after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
