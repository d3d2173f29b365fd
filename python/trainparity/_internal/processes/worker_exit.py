"""How our worker processes end: the interpreter's final collections skipped, nothing else."""

from __future__ import annotations

import gc
import sys
from typing import NoReturn

__all__ = ["exit_worker"]


def exit_worker(code: int) -> NoReturn:
    """Leave a worker process with `code`, telling the cyclic collector there is nothing to find.

    A worker's heap is mostly the objects its imports made (torch alone, with the
    torch._dynamo an optimizer pulls in, makes millions), and the interpreter's
    finalization collects every generation before it clears the modules: 0.4 s of CPU per
    child of the accumulation quickstart (docs/validation.md). Frozen objects are left to
    that clearing; atexit handlers, flushes and every reference-counted release still run
    as in any exit, so nothing a case's code set up is lost. Only for a process that ends.
    """
    gc.freeze()
    sys.exit(code)
