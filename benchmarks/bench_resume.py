"""Resume benchmark: trainparity vs TrainParity 0.1.0 (separate venv, black box), same run.

1. The quickstart clean case end to end (fresh interpreter, import included),
   the rows of issue 28 (the original; ours with parallel=False; ours by
   default; ours under OMP_NUM_THREADS=1): medians of the whole process's
   wall time and its process tree's CPU time (benchmarks/against_original.py).
   Targets, ours by default against the original: wall <= 0.5x, CPU <= 0.9x.
2. A case whose observed state is ~1 GiB (wide MLP + Adam): the parent's peak
   RSS growth during the check relative to the state size (target <= 0.25),
   and snapshot+compare seconds of both implementations.

Usage: python benchmarks/bench_resume.py [--repeats N] [--skip-large] [--width W]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from against_original import Variant, measure, reference_python, report, run_once, table_variants

HERE = Path(__file__).resolve().parent
WALL_TARGET = 0.5
CPU_TARGET = 0.9

# Runs inside either implementation's interpreter; prints one JSON line.
# argv: the variant's check_resume options (JSON, ours only), the case, this folder.
DRIVER = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
started = time.perf_counter()
import torch
from trainparity import check_resume

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field):
            return int(line.split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as stream:
    stream.write("5")  # resets the peak RSS (VmHWM) so it measures the check alone
rss_before = status("VmRSS")
result = check_resume(sys.argv[2], cwd=Path(sys.argv[3]), **json.loads(sys.argv[1]))
wall = time.perf_counter() - started
timing = result.timing_seconds or {}
snapshot_seconds = sum(v for k, v in timing.items() if k.startswith("snapshot_") and k != "snapshot_capture")
print(json.dumps({
    "outcome": str(result.outcome), "message": result.message, "wall": wall,
    "check_seconds": timing.get("total_wall"), "snapshot_seconds": snapshot_seconds,
    "comparison_seconds": timing.get("comparison", 0.0),
    "rss_before": rss_before, "rss_peak": status("VmHWM"),
    "checkpoint_max_bytes": result.checkpoint_max_bytes, "snapshot_ipc_bytes": result.snapshot_ipc_bytes,
}))
"""


def passed(record: dict) -> str | None:
    return None if record["outcome"].endswith("PASS") else f"did not PASS: {record}"


def quickstart(ours: str, theirs: str, repeats: int) -> None:
    case = "trainparity.quickstarts.resume:CleanCase"
    print("quickstart clean case, end to end (fresh interpreter, import included)")
    samples = measure(
        DRIVER, table_variants(ours, theirs), repeats, [case, str(HERE)], HERE, passed
    )
    report(samples, wall_target=WALL_TARGET, cpu_target=CPU_TARGET)


def large_state(ours: str, theirs: str, width: int) -> None:
    environment = {"BENCH_RESUME_WIDTH": str(width)}
    case = "resume_bench_cases:WideMLPCase"
    mine = run_once(DRIVER, Variant("ours", ours, {}, environment), [case, str(HERE)], HERE).record
    state_bytes = mine["checkpoint_max_bytes"]
    growth = mine["rss_peak"] - mine["rss_before"]
    print(
        f"~{state_bytes / 2**30:.2f} GiB observed state (wide MLP + Adam), outcome {mine['outcome']}"
    )
    print(
        f"  trainparity parent RSS before check {mine['rss_before'] / 2**20:.0f} MiB, peak {mine['rss_peak'] / 2**20:.0f} MiB"
    )
    print(f"  parent peak RSS growth / state size = {growth / state_bytes:.3f}   (target <= 0.25)")
    print(
        f"  trainparity snapshot {mine['snapshot_seconds']:.2f} s + compare {mine['comparison_seconds']:.3f} s, check {mine['check_seconds']:.1f} s"
    )
    started = time.perf_counter()
    try:
        reference = run_once(
            DRIVER, Variant("0.1.0", theirs, {}, environment), [case, str(HERE)], HERE
        ).record
    except RuntimeError as error:
        print(f"  TrainParity 0.1.0 failed on this case: {str(error)[-300:]}")
        return
    reference_growth = reference["rss_peak"] - reference["rss_before"]
    print(f"  0.1.0 parent peak RSS growth / state size = {reference_growth / state_bytes:.3f}")
    print(
        f"  0.1.0 snapshot {reference['snapshot_seconds']:.2f} s + compare {reference['comparison_seconds']:.3f} s, check {reference['check_seconds']:.1f} s ({time.perf_counter() - started:.0f} s wall)"
    )
    ours_cost = mine["snapshot_seconds"] + mine["comparison_seconds"]
    theirs_cost = reference["snapshot_seconds"] + reference["comparison_seconds"]
    print(f"  snapshot+compare seconds ours/0.1.0 = {ours_cost / theirs_cost:.3f}")
    print(
        f"  snapshot IPC bytes ours {mine['snapshot_ipc_bytes'] / 2**20:.0f} MiB vs 0.1.0 {reference['snapshot_ipc_bytes'] / 2**20:.0f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument(
        "--width", type=int, default=4096, help="MLP width; 4096 x 5 layers + Adam ~ 1 GiB"
    )
    arguments = parser.parse_args()
    ours, theirs = sys.executable, reference_python()
    print(f"machine: {os.cpu_count()} CPUs; ours {ours}; reference {theirs}")
    quickstart(ours, theirs, arguments.repeats)
    if not arguments.skip_large:
        large_state(ours, theirs, arguments.width)


if __name__ == "__main__":
    main()
