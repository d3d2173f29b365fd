"""Benchmarks track_ids: its cost per batch against an empty loop over a fast in-memory loader."""

# Run from the repository root with trainparity installed:
#
#     python benchmarks/bench_track_ids.py
#
# The loader is a torch DataLoader over an in-memory TensorDataset (4096
# samples of 16 float32 features and an int64 ID, batch_size=64, no workers):
# the default loader of a small in-memory job, whose batches cost tens of
# microseconds each. The plain loop and the tracked loop (track_ids with
# id_of=batch[0], recording to a temporary directory) are timed alternately
# in CPU time (process_time, which the other processes of a shared machine
# disturb little) over whole passes, and the medians compared. Every pass
# records into one epoch: a new epoch costs one file open and close (tens of
# microseconds, once an epoch), which passes this short would magnify. Also printed:
# track_ids' own cost per batch over a list of ready batches (no loader).
# Target: the tracked loop costs <= 2% more than the plain one.

from __future__ import annotations

import statistics
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset
from trainparity._internal.recording.record_ids import flush_ids
from trainparity._internal.recording.track_ids import track_ids

SAMPLES, FEATURES, BATCH = 8192, 16, 64
REPEATS = 41


def epoch_seconds(iterable: object) -> float:
    start = time.process_time()
    for _batch in iterable:  # type: ignore[attr-defined]
        pass
    return time.process_time() - start


def main() -> None:
    torch.set_num_threads(1)
    ids = torch.arange(SAMPLES, dtype=torch.int64)
    loader = DataLoader(
        TensorDataset(ids, torch.randn(SAMPLES, FEATURES)), batch_size=BATCH, shuffle=True
    )
    batches = SAMPLES // BATCH
    with tempfile.TemporaryDirectory() as directory:
        plain, tracked = [], []
        wrapped = track_ids(loader, id_of=lambda batch: batch[0], epoch=0, directory=directory)
        for repeat in range(REPEATS + 1):  # the first pair warms up
            if repeat % 2:  # alternate which loop runs first
                pair = (epoch_seconds(loader), epoch_seconds(wrapped))
            else:
                pair = tuple(reversed((epoch_seconds(wrapped), epoch_seconds(loader))))
            if repeat:
                plain.append(pair[0])
                tracked.append(pair[1])
        ready = list(loader)
        own = [
            epoch_seconds(
                track_ids(ready, id_of=lambda batch: batch[0], epoch=1, directory=directory)
            )
            for _repeat in range(REPEATS)
        ]
        flush_ids()
    plain_batch = statistics.median(plain) / batches
    tracked_batch = statistics.median(tracked) / batches
    own_batch = statistics.median(own) / batches
    print(f"empty loop over the loader: {plain_batch * 1e6:.2f} us per batch")
    print(f"the same loop through track_ids: {tracked_batch * 1e6:.2f} us per batch")
    print(f"track_ids alone (ready batches): {own_batch * 1e6:.2f} us per batch")
    print(
        f"overhead: {(tracked_batch - plain_batch) / plain_batch:+.2%} measured, "
        f"{own_batch / plain_batch:.2%} from track_ids' own cost (target <= 2%)"
    )


if __name__ == "__main__":
    main()
