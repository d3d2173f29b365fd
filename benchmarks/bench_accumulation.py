"""Benchmark: the accumulation quickstart's clean check, ours vs TrainParity 0.1.0, same run.

Each run is a fresh interpreter (ours: this Python; the original: the
reference venv's Python, see benchmarks/reference_venv.sh) running a small
driver that imports its own trainparity and calls the accumulation runner on
the quickstart's `Case` with the quickstart's clean plan and tolerance. The
rows are issue 28's: the original (children one after another), ours with
`parallel=False`, ours by default (children at once, each with the fair share
of the cores), and ours by default under the user's `OMP_NUM_THREADS=1`.
Whole process wall time and the CPU time of the process tree, medians of
interleaved runs (benchmarks/against_original.py). Targets, ours by default
against the original: wall <= 0.55x, CPU <= 1.0x; and the CPU of the check's
children (what the driver's RUSAGE_CHILDREN counts) run at once against one at
a time (ours by default / ours with parallel=False): <= 1.03x.

    python benchmarks/bench_accumulation.py [--runs 5] [--reference-python PATH]

Without --reference-python the original's interpreter comes from
benchmarks/reference_venv.sh (creating that venv on first use; set
TRAINPARITY_REFERENCE_VENV to reuse one elsewhere).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from against_original import (
    measure,
    reference_python,
    report,
    report_children,
    table_variants,
)

WALL_TARGET = 0.55
CPU_TARGET = 1.0
CONCURRENT_CHILDREN_TARGET = 1.03

# Run by either interpreter: only names both versions define in the same modules
# (AccumulationRunner is what check_accumulation runs, CONTRACT §1.4, §10.2).
# argv[1]: the runner options of the variant (`parallel`, ours only).
DRIVER = """
import json, resource, sys, time
from trainparity.accumulation import AccumulationExecutionPlan, AccumulationRunner
from trainparity.comparison import ToleranceComparison
began = time.perf_counter()
runner = AccumulationRunner(
    comparison=ToleranceComparison(rtol=1e-6, atol=1e-7), **json.loads(sys.argv[1])
)
result = runner.run(
    "trainparity.quickstarts.accumulation:Case", candidate=AccumulationExecutionPlan(2)
)
elapsed = time.perf_counter() - began
children = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({
    "outcome": str(result.outcome.value),
    "check_seconds": elapsed,
    "children_cpu": children.ru_utime + children.ru_stime,
}))
"""


def passed(record: dict) -> str | None:
    return None if record["outcome"] == "PASS" else f"the clean case did not PASS: {record}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per variant (>= 3)")
    parser.add_argument("--reference-python", help="python of a venv with trainparity==0.1.0")
    arguments = parser.parse_args()
    if arguments.runs < 3:
        parser.error("--runs must be at least 3 (medians of >= 3 runs)")
    # Absolute, not resolved: a venv's python is a symlink that must keep its venv.
    reference = os.path.abspath(arguments.reference_python or reference_python())
    if not Path(reference).exists():
        parser.error(f"{reference} does not exist")
    with tempfile.TemporaryDirectory(prefix="bench-accumulation-") as empty:
        # An empty cwd: neither interpreter may import this checkout by accident.
        samples = measure(
            DRIVER,
            table_variants(sys.executable, reference),
            arguments.runs,
            [],
            Path(empty),
            passed,
        )
    report(samples, wall_target=WALL_TARGET, cpu_target=CPU_TARGET)
    report_children(samples, "ours, parallel=False", CONCURRENT_CHILDREN_TARGET)
    return 0


if __name__ == "__main__":
    sys.exit(main())
