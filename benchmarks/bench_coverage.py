"""Benchmarks sample coverage: 100M IDs over 8 rank arrays, and the observations API vs 0.1.0."""

# Run from the repository root with trainparity installed:
#
#     python benchmarks/bench_coverage.py                      # everything
#     python benchmarks/bench_coverage.py --skip-reference     # no TrainParity 0.1.0 comparison
#
# Part 1 audits 100M int64 IDs (a random permutation split over 8 ranks, as a
# DistributedSampler run would record them) against ExactlyOnce(range(100M))
# through audit_rank_arrays and prints the audit's wall time and the process's
# peak RSS, with how much of it is the input data. Targets: <= 15 s, <= 3 GB.
#
# Part 2 times audit_sample_coverage on the same 1M and 10M SampleObservation
# inputs here and in TrainParity 0.1.0 (its own venv, made by
# benchmarks/reference_venv.sh, run as a separate process), timing only the audit
# call, and prints the medians and the ratio. Target: >= 20x.

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy
from trainparity._internal.coverage.audit import (
    ExactlyOnce,
    SampleObservation,
    audit_rank_arrays,
    audit_sample_coverage,
)

RANKS = 8
GIB = 2**30

# Builds the observations and times only the audit; identical for both packages.
# IDs are a fixed permutation of range(n) (7919 is coprime to 10**k), spread
# round-robin over 8 ranks like a DistributedSampler.
OBSERVATIONS_SCRIPT = """
import json, sys, time
from trainparity._internal.coverage.audit import ExactlyOnce, SampleObservation, audit_sample_coverage
size, repeats = int(sys.argv[1]), int(sys.argv[2])
observations = [SampleObservation((i * 7919) % size, i % 8, 0, i // 8) for i in range(size)]
policy = ExactlyOnce(range(size))
seconds = []
for _ in range(repeats):
    start = time.perf_counter()
    result = audit_sample_coverage(observations, policy)
    seconds.append(time.perf_counter() - start)
    assert result.outcome == "PASS", result
print(json.dumps(seconds))
"""


def peak_rss_bytes() -> int:
    """Peak resident set size of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def current_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def time_rank_arrays(per_rank: dict, size: int, repeats: int, outcome: str) -> float:
    """Median wall time of audit_rank_arrays over `repeats` audits."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = audit_rank_arrays(per_rank, policy=ExactlyOnce(range(size)))
        seconds.append(time.perf_counter() - start)
        assert result.outcome == outcome, result
    return statistics.median(seconds)


def bench_rank_arrays(size: int, repeats: int) -> None:
    print(f"== {size:,} int64 IDs over {RANKS} rank arrays, ExactlyOnce(range({size:,}))")
    rss_before = current_rss_bytes()
    start = time.perf_counter()
    ids = numpy.random.default_rng(23).permutation(size)  # int64, one array
    per_rank = {rank: part for rank, part in enumerate(numpy.array_split(ids, RANKS))}  # views
    generation = time.perf_counter() - start
    peak_before_audit = peak_rss_bytes()
    clean = time_rank_arrays(per_rank, size, repeats, "PASS")
    peak = peak_rss_bytes()
    # A resumed rank 7 that replays the first 1,000 IDs of rank 0 instead of its own.
    per_rank[RANKS - 1][:1000] = per_rank[0][:1000]
    replayed = time_rank_arrays(per_rank, size, repeats, "FAIL")
    peak_replayed = peak_rss_bytes()
    print(f"data generation          {generation:8.2f} s (not part of the audit)")
    print(f"audit wall time          {clean:8.2f} s median of {repeats} (target <= 15 s)")
    print(f"  with 1,000 replayed    {replayed:8.2f} s median of {repeats} (FAIL path)")
    print(f"peak RSS of the process  {peak / GIB:8.2f} GiB (target <= 3 GB = 2.79 GiB)")
    print(f"  input ID arrays        {ids.nbytes / GIB:8.2f} GiB")
    print(f"  interpreter + imports  {rss_before / GIB:8.2f} GiB (RSS before generating data)")
    print(f"  peak before the audit  {peak_before_audit / GIB:8.2f} GiB")
    print(f"  added by the audit     {(peak - peak_before_audit) / GIB:8.2f} GiB")
    print(f"  after the FAIL audits  {peak_replayed / GIB:8.2f} GiB")


def time_ours(size: int, repeats: int) -> list[float]:
    observations = [SampleObservation((i * 7919) % size, i % 8, 0, i // 8) for i in range(size)]
    policy = ExactlyOnce(range(size))
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = audit_sample_coverage(observations, policy)
        seconds.append(time.perf_counter() - start)
        assert result.outcome == "PASS", result
    return seconds


def time_reference(python: str, size: int, repeats: int) -> list[float]:
    completed = subprocess.run(
        [python, "-c", OBSERVATIONS_SCRIPT, str(size), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",  # never pick up this checkout's trainparity
    )
    return json.loads(completed.stdout)


def reference_python() -> str:
    """The python of the 0.1.0 venv, created by reference_venv.sh beside this script if needed."""
    script = Path(__file__).with_name("reference_venv.sh")
    if not script.exists():
        sys.exit(f"{script} is missing; pass --reference-python or --skip-reference")
    completed = subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True)
    return completed.stdout.strip().splitlines()[-1]


def bench_observations(
    sizes: list[int], repeats: int, reference_repeats: int, python: str | None
) -> None:
    for size in sizes:
        print(f"== audit_sample_coverage, {size:,} SampleObservation, ExactlyOnce(range({size:,}))")
        ours = statistics.median(time_ours(size, repeats))
        print(f"trainparity (this)       {ours:8.3f} s median of {repeats}")
        if python is None:
            continue
        reference = statistics.median(time_reference(python, size, reference_repeats))
        print(f"TrainParity 0.1.0        {reference:8.3f} s median of {reference_repeats}")
        print(f"ratio                    {reference / ours:8.1f}x (target >= 20x)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--array-size", type=int, default=100_000_000)
    parser.add_argument("--array-repeats", type=int, default=3, help="audits of the arrays")
    parser.add_argument("--sizes", default="1000000,10000000", help="observation-API sizes")
    parser.add_argument("--repeats", type=int, default=5, help="audits of ours per size")
    parser.add_argument(
        "--reference-repeats", type=int, default=1, help="audits of 0.1.0 per size (slow)"
    )
    parser.add_argument("--reference-python", help="python of a venv with TrainParity 0.1.0")
    parser.add_argument("--skip-reference", action="store_true")
    parser.add_argument("--skip-arrays", action="store_true")
    arguments = parser.parse_args()
    if not arguments.skip_arrays:
        bench_rank_arrays(arguments.array_size, arguments.array_repeats)
    sizes = [int(size) for size in arguments.sizes.split(",") if size]
    python = None
    if not arguments.skip_reference:
        python = arguments.reference_python or reference_python()
    bench_observations(sizes, arguments.repeats, arguments.reference_repeats, python)
    return 0


if __name__ == "__main__":
    sys.exit(main())
