"""Benchmark: warm starts against fresh ones (issue 25), whole process, ratios within one run.

Rows, each a fresh interpreter running a small driver (benchmarks/against_original.py
measures its wall time and the CPU time of its whole process tree; rows
interleave so machine load hits all alike):

- resume fresh / warm: check_resume of the resume quickstart's clean case;
- plain run: one run of that case's training script to its last step (what
  a user's CI would pay without trainparity: interpreter, torch, training);
- accumulation fresh / warm: the accumulation quickstart's clean check;
- 4 warm checks, own / shared servers: four warm resume checks of the
  quickstart in one process (a suite's setting), each starting and stopping
  its servers, or inside `shared_warm_servers()` (the first check starts the
  server, the next three borrow it). Per check against one plain run, the
  shared row is what a suite pays for each check after its first.

Every row runs with PYTHONHASHSEED=0: warm mode shares one server between
a check's children only when their hash seed is fixed (docs/limitations.md).
Targets: resume warm/fresh <= 0.5x wall and CPU; warm resume check / plain
run <= 1.2x; accumulation warm/fresh <= 0.5x.

    python benchmarks/bench_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from against_original import Variant, measure, median_table, print_load

RESUME = "trainparity.quickstarts.resume"
DRIVER = """
import json, sys, time
options = json.loads(sys.argv[1])
began = time.perf_counter()
if options["kind"] == "plain":
    import runpy
    sys.argv = ["resume.py", "worker", "--run-dir", "run", "--end-step", "4"]
    try:
        runpy.run_module("trainparity.quickstarts.resume", run_name="__main__")
    except SystemExit as exit:
        outcome = "PASS" if exit.code in (0, None) else f"exit {exit.code}"
    else:
        outcome = "PASS"
elif options["kind"] == "resume":
    from trainparity import check_resume
    result = check_resume("trainparity.quickstarts.resume:CleanCase", start=options["start"])
    outcome = str(result.outcome.value)
elif options["kind"] == "resume-many":
    import contextlib
    from trainparity import check_resume, shared_warm_servers
    outcomes = set()
    with shared_warm_servers() if options["shared"] else contextlib.nullcontext():
        for _ in range(options["checks"]):
            result = check_resume("trainparity.quickstarts.resume:CleanCase", start="warm")
            outcomes.add(str(result.outcome.value))
    outcome = outcomes.pop() if len(outcomes) == 1 else str(sorted(outcomes))
else:
    from trainparity import check_accumulation
    from trainparity.accumulation import AccumulationExecutionPlan
    from trainparity.comparison import ToleranceComparison
    result = check_accumulation(
        "trainparity.quickstarts.accumulation:Case",
        candidate=AccumulationExecutionPlan(2),
        comparison=ToleranceComparison(rtol=1e-6, atol=1e-7),
        start=options["start"],
    )
    outcome = str(result.outcome.value)
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - began}))
"""

SEED = {"PYTHONHASHSEED": "0"}
MANY = {"kind": "resume-many", "checks": 4}
VARIANTS = [
    Variant("resume fresh", sys.executable, {"kind": "resume", "start": "fresh"}, SEED),
    Variant("resume warm", sys.executable, {"kind": "resume", "start": "warm"}, SEED),
    Variant("plain run", sys.executable, {"kind": "plain"}, SEED),
    Variant("accumulation fresh", sys.executable, {"kind": "accumulation", "start": "fresh"}, SEED),
    Variant("accumulation warm", sys.executable, {"kind": "accumulation", "start": "warm"}, SEED),
    Variant("4 warm checks, own servers", sys.executable, MANY | {"shared": False}, SEED),
    Variant("4 warm checks, shared servers", sys.executable, MANY | {"shared": True}, SEED),
]
# (numerator, denominator, target): both wall and CPU are printed, each against the target.
RATIOS = [
    ("resume warm", "resume fresh", 0.5),
    ("resume warm", "plain run", 1.2),
    ("accumulation warm", "accumulation fresh", 0.5),
]
# Printed without a target: what sharing servers saves, and a shared check after the first
# against one plain run (the row's time less one warm check's, over the three).
SHARED = ("4 warm checks, shared servers", "4 warm checks, own servers")


def passed(record: dict) -> str | None:
    return None if record["outcome"] == "PASS" else f"the clean case did not PASS: {record}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per row (>= 3)")
    arguments = parser.parse_args()
    if arguments.runs < 3:
        parser.error("--runs must be at least 3 (medians)")
    with tempfile.TemporaryDirectory(prefix="bench-start-") as scratch:
        samples = measure(DRIVER, VARIANTS, arguments.runs, [], Path(scratch), passed)
    table = median_table(samples)
    met = True
    print()
    for numerator, denominator, target in RATIOS:
        wall = table[numerator][0] / table[denominator][0]
        cpu = table[numerator][1] / table[denominator][1]
        met = met and wall <= target and cpu <= target
        print(f"{numerator} / {denominator}: wall {wall:.2f}x, cpu {cpu:.2f}x (target <= {target})")
    shared, own = table[SHARED[0]], table[SHARED[1]]
    print(
        f"{SHARED[0]} / {SHARED[1]}: wall {shared[0] / own[0]:.2f}x, cpu {shared[1] / own[1]:.2f}x"
    )
    later = [(shared[index] - table["resume warm"][index]) / 3 for index in (0, 1)]
    plain = table["plain run"]
    print(
        f"each shared check after the first / plain run: wall {later[0] / plain[0]:.2f}x, "
        f"cpu {later[1] / plain[1]:.2f}x"
    )
    print_load(samples)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
