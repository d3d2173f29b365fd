"""Resume benchmark: trainparity vs TrainParity 0.1.0 (separate venv, black box), same run.

1. The quickstart clean case end to end (fresh interpreter, import included):
   median wall seconds of each, and the ratio (target <= 0.6).
2. A case whose observed state is ~1 GiB (wide MLP + Adam): the parent's peak
   RSS growth during the check relative to the state size (target <= 0.25),
   and snapshot+compare seconds of both implementations.

Usage: python benchmarks/bench_resume.py [--repeats N] [--skip-large] [--width W]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Runs inside either implementation's interpreter; prints one JSON line.
DRIVER = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
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
result = check_resume(sys.argv[1], cwd=Path(sys.argv[2]))
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


def reference_python() -> str:
    completed = subprocess.run(
        ["bash", str(HERE / "reference_venv.sh")], capture_output=True, text=True, check=True
    )
    return completed.stdout.strip().splitlines()[-1]


def run_driver(python: str, case: str, environment: dict[str, str] | None = None) -> dict:
    env = {**os.environ, **(environment or {})}
    completed = subprocess.run(
        [python, "-c", DRIVER, case, str(HERE)],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
        cwd=HERE,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{python} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def quickstart(ours: str, theirs: str, repeats: int) -> None:
    case = "trainparity.quickstarts.resume:CleanCase"
    ours_walls, theirs_walls = [], []
    for _ in range(repeats):  # interleaved, so machine load hits both alike
        ours_walls.append(run_driver(ours, case)["wall"])
        theirs_walls.append(run_driver(theirs, case)["wall"])
    ours_median, theirs_median = statistics.median(ours_walls), statistics.median(theirs_walls)
    print("quickstart clean case, end to end (fresh interpreter, import included)")
    print(
        f"  trainparity      median {ours_median:6.2f} s   runs {[round(w, 2) for w in ours_walls]}"
    )
    print(
        f"  TrainParity 0.1.0 median {theirs_median:6.2f} s   runs {[round(w, 2) for w in theirs_walls]}"
    )
    print(f"  ratio ours/0.1.0 = {ours_median / theirs_median:.2f}   (target <= 0.6)")


def large_state(ours: str, theirs: str, width: int) -> None:
    environment = {"BENCH_RESUME_WIDTH": str(width)}
    case = "resume_bench_cases:WideMLPCase"
    mine = run_driver(ours, case, environment)
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
        reference = run_driver(theirs, case, environment)
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
