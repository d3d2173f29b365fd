"""Benchmark: an own-step check vs the declarative check, and 2 ranks vs 1, medians of one run.

On the accumulation quickstart's model (benchmarks/own_step_bench_cases.py
adds the user's train_step), four checks alternate in each round so that
load on the machine hits them alike:

- declarative: the quickstart's `Case` with `AccumulationExecutionPlan(2)`;
- own step:    `OwnStepCase` (the same case plus train_step), same plan;
- 1 rank:      `OwnStepCase` with `AccumulationExecutionPlan(4)`;
- 2 ranks:     `OwnStepCase` with `AccumulationExecutionPlan(4, world_size=2)`.

Each figure is the wall time of check_accumulation in this process (all its
children included), beside the CPU time (user + system) of the children it
reaped, which says what a check costs whatever else runs on the machine.
Prints the medians and the ratios own step / declarative (target ≤ 1.1) and
2 ranks / 1 rank (target ≤ 1.5). Under torch 2.13 every rank pays for
`DistributedDataParallel.__init__` importing `torch._dynamo` (about twice
`import torch`), which no setting avoids.

    python benchmarks/bench_own_step.py [--runs 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

from trainparity.accumulation import AccumulationExecutionPlan, check_accumulation
from trainparity.comparison import ToleranceComparison

HERE = Path(__file__).resolve().parent
TOLERANCE = ToleranceComparison(rtol=1e-6, atol=1e-7)
CHECKS = {
    "declarative": ("trainparity.quickstarts.accumulation:Case", AccumulationExecutionPlan(2)),
    "own step": ("own_step_bench_cases:OwnStepCase", AccumulationExecutionPlan(2)),
    "1 rank": ("own_step_bench_cases:OwnStepCase", AccumulationExecutionPlan(4)),
    "2 ranks": ("own_step_bench_cases:OwnStepCase", AccumulationExecutionPlan(4, world_size=2)),
}


def timed(case: str, plan: AccumulationExecutionPlan) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the reaped children) of one check."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    result = check_accumulation(
        case,
        candidate=plan,
        comparison=TOLERANCE,
        cwd=HERE,
        environment={"OMP_NUM_THREADS": "1"},
    )
    elapsed = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.outcome != "PASS":
        sys.exit(f"{case} with {plan} did not PASS: {result.message}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    sys.path.insert(0, str(HERE))  # the parent loads the case too
    timed(*CHECKS["2 ranks"])  # warm-up: file caches, the first gloo rendezvous
    seconds: dict[str, list[tuple[float, float]]] = {name: [] for name in CHECKS}
    for _ in range(runs):
        for name, (case, plan) in CHECKS.items():
            seconds[name].append(timed(case, plan))
    medians = {
        name: statistics.median(wall for wall, _ in values) for name, values in seconds.items()
    }
    for name, values in seconds.items():
        cpu = statistics.median(cpu for _, cpu in values)
        print(f"{name:12s} median {medians[name]:6.2f} s wall, {cpu:6.2f} s CPU over {runs} runs")
    print(
        f"own step / declarative: {medians['own step'] / medians['declarative']:.2f}  (target <= 1.1)"
    )
    print(f"2 ranks / 1 rank:       {medians['2 ranks'] / medians['1 rank']:.2f}  (target <= 1.5)")


if __name__ == "__main__":
    main()
