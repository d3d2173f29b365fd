"""Ending a rank of a torch.distributed job without torch's gloo teardown deadlock.

When the last reference to a gloo process group goes (typically DDP's
Reducer, as `main()` returns or the interpreter finalizes), its destructor
joins the group's worker threads while holding the GIL; a worker still
releasing the last collective's work, whose tensors Python has already
dropped, waits for the GIL. Both wait forever, or the process aborts. It
takes a worker preempted at the wrong moment, which busy CPUs make likely:
a correct program then hangs until the phase's timeout (docs/distributed.md,
"The hang of a correct program"). `end_rank` leaves before any destructor
runs.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

from trainparity._internal.recording.record_ids import flush_ids

__all__ = ["end_rank"]


def end_rank(exit_code: int = 0, *, barrier: bool = True) -> NoReturn:
    """End this rank's process now: wait for the other ranks, tear the group down, exit.

    Call it as the last line of a rank's script, once everything the rank
    must write is written. In order: a barrier (`barrier=False` skips it;
    every rank must call end_rank then, or none may use the barrier), so no
    rank leaves while another still writes its part of a checkpoint;
    `destroy_process_group()`; `record_ids`' buffers flushed; stdout and
    stderr flushed; then `os._exit(exit_code)`, which skips destructors and
    `atexit` handlers. `record()` writes every step as it goes and needs no
    flush. Without an initialised process group it only flushes and exits.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
    flush_ids()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
