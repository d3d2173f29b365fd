"""Benchmarks the SameGlobalOrder audit: 8 ranks x 12.5M IDs, the resumed run in 3 phases."""

# Run from the repository root with trainparity installed:
#
#     python benchmarks/bench_global_order.py [--keep DIR]
#
# Writes the records of an uninterrupted run (8 ranks, 12.5M int64 IDs each,
# 32 IDs per rank and batch: a global batch of 256) and of a resumed run of
# the same global sequence in three phases on 8, 4 and 2 ranks (batches of
# 32, 64 and 128 IDs per rank), as record_ids would: `.ids` and `.batches`
# files, 1.6 GB in all, in a temporary directory (page cache warm). Then, in
# a fresh process each, audits SameGlobalOrder over them: once as written
# (PASS: every ID compared) and once with two IDs of the last phase swapped
# (FAIL, located and explained). Prints each audit's wall time and the
# auditing process's peak RSS (VmHWM, with torch imported: ~0.27 GiB of it). Targets: <= 3 s and <= 2 GB for the PASS audit.

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy

RANKS, PER_RANK, RANK_BATCH = 8, 12_500_000, 32
TOTAL = RANKS * PER_RANK
GLOBAL_BATCH = RANKS * RANK_BATCH
PHASES = ((8, 0.4), (4, 0.35), (2, 0.25))  # (ranks, share of the global batches)

AUDIT = """
import json, sys, time
from trainparity._internal.coverage.global_order import audit_global_order
root = sys.argv[1]
start = time.perf_counter()
result = audit_global_order(f"{root}/reference", [f"{root}/{name}" for name in sys.argv[2:]])
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: execve carries the forking parent's peak into ru_maxrss.
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_rss": peak * 1024,
                  "outcome": str(result.outcome), "message": result.message}))
"""


def write_run(directory: Path, sequence: numpy.ndarray, ranks: int, first: int, stop: int) -> None:
    """Global batches [first, stop) of `sequence` as `ranks` ranks' records."""
    directory.mkdir(parents=True)
    width = GLOBAL_BATCH // ranks
    batches = sequence[first * GLOBAL_BATCH : stop * GLOBAL_BATCH].reshape(-1, ranks, width)
    ends = numpy.arange(1, len(batches) + 1, dtype="<i8") * width
    for rank in range(ranks):
        numpy.ascontiguousarray(batches[:, rank, :]).astype("<i8").tofile(
            directory / f"rank{rank}.epoch0.ids"
        )
        ends.tofile(directory / f"rank{rank}.epoch0.batches")


def audit(root: Path, phases: list[str]) -> dict[str, object]:
    completed = subprocess.run(
        [sys.executable, "-c", AUDIT, str(root), *phases],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(completed.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--keep", type=Path, help="write the records here and keep them")
    arguments = parser.parse_args()
    root = arguments.keep or Path(tempfile.mkdtemp(prefix="bench-global-order-"))
    # A fixed permutation of range(TOTAL): 7919 is prime and does not divide 10**8.
    sequence = (numpy.arange(TOTAL, dtype=numpy.int64) * 7919) % TOTAL
    batches = TOTAL // GLOBAL_BATCH
    write_run(root / "reference", sequence, RANKS, 0, batches)
    first, names = 0, []
    for index, (ranks, share) in enumerate(PHASES):
        stop = batches if index == len(PHASES) - 1 else first + int(batches * share)
        names.append(f"phase{index}")
        write_run(root / names[-1], sequence, ranks, first, stop)
        first = stop
    del sequence
    passed = audit(root, names)
    # Swap two IDs near the end of the last phase's rank 1: the audit must find and explain it.
    record = root / names[-1] / "rank1.epoch0.ids"
    values = numpy.memmap(record, dtype="<i8", mode="r+")
    values[-1000], values[-3] = int(values[-3]), int(values[-1000])
    values.flush()
    del values
    failed = audit(root, names)
    gib = 2**30
    for name, measured in (("PASS (as written)", passed), ("FAIL (two IDs swapped)", failed)):
        print(
            f"{name}: {measured['outcome']} in {measured['seconds']:.2f} s, "
            f"peak RSS {measured['peak_rss'] / gib:.2f} GiB"
        )
        print(f"  {measured['message']}")
    print(f"records: {root} ({2 * TOTAL * 8 / 1e9:.1f} GB of IDs); targets: <= 3 s, <= 2 GB")
    if arguments.keep is None:
        for path in sorted(root.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        root.rmdir()


if __name__ == "__main__":
    main()
