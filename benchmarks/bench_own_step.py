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
2 ranks / 1 rank (target ≤ 1.5), of wall and of CPU time.

What a rank costs (torch 2.13, measured): what a baseline costs, plus about
10 ms of CPU for gloo, DDP and the collectives. Most of either is starting
a fresh process: `import torch` (~0.9 s of CPU) and `torch._dynamo` (~1 s),
which every child imports when the case's `build()` constructs its optimizer
(`Optimizer.__init__` calls `add_param_group`, a `torch._disable_dynamo`
function that imports it on first call); DDP's own use of `torch._dynamo`
comes after and costs nothing more. A 2-rank check runs four such processes
where a 1-rank check runs three, so on a machine whose cores are all busy
the ratio is about 4/3 (its CPU ratio, whatever the load). Nothing of
trainparity's own is left to cut there short of giving up fresh processes.

    python benchmarks/bench_own_step.py [--runs 5]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

from trainparity._internal.accumulation.check import AccumulationExecutionPlan, check_accumulation
from trainparity._internal.comparison.policies import ToleranceComparison

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
    cpu_medians = {
        name: statistics.median(cpu for _, cpu in values) for name, values in seconds.items()
    }
    for name in CHECKS:
        print(
            f"{name:12s} median {medians[name]:6.2f} s wall, {cpu_medians[name]:6.2f} s CPU "
            f"over {runs} runs"
        )
    for label, numerator, denominator, target in (
        ("own step / declarative", "own step", "declarative", "1.1"),
        ("2 ranks / 1 rank", "2 ranks", "1 rank", "1.5"),
    ):
        wall = medians[numerator] / medians[denominator]
        cpu = cpu_medians[numerator] / cpu_medians[denominator]
        print(f"{label + ':':24s}{wall:.2f} wall, {cpu:.2f} CPU  (target <= {target})")


if __name__ == "__main__":
    main()
