"""Benchmark: the accumulation quickstart's clean case, ours vs TrainParity 0.1.0, same run.

Each measurement is a fresh interpreter (ours: this Python; the original: the
reference venv's Python, see benchmarks/reference_venv.sh) running a small
driver that imports its own trainparity and calls check_accumulation on the
quickstart's `Case` with the quickstart's clean plan and tolerance. Two
figures per run: the check's own wall time (measured inside the driver) and
the whole process, interpreter start and imports included. Runs alternate
between the two implementations so that load on the machine hits both alike;
medians and the ratio ours / original are printed.

    python benchmarks/bench_accumulation.py [--runs 5] [--reference-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
DEFAULT_REFERENCE = REPOSITORY / "benchmarks" / ".reference-venv" / "bin" / "python"

# Run by either interpreter: only names both versions define in the same modules
# (AccumulationRunner is what check_accumulation runs, CONTRACT §1.4, §10.2).
DRIVER = """
import json, sys, time
from trainparity.accumulation import AccumulationExecutionPlan, AccumulationRunner
from trainparity.comparison import ToleranceComparison
began = time.perf_counter()
runner = AccumulationRunner(comparison=ToleranceComparison(rtol=1e-6, atol=1e-7))
result = runner.run(
    "trainparity.quickstarts.accumulation:Case", candidate=AccumulationExecutionPlan(2)
)
elapsed = time.perf_counter() - began
print(json.dumps({"outcome": str(result.outcome.value), "check_seconds": elapsed}))
"""


def measure(python: str) -> tuple[float, float]:
    """(check seconds, whole-process seconds) of one driver run; exits if the check did not PASS."""
    with tempfile.TemporaryDirectory(prefix="bench-accumulation-") as empty:
        began = time.perf_counter()
        completed = subprocess.run(
            [python, "-c", DRIVER],
            cwd=empty,  # neither interpreter may import this checkout by accident
            capture_output=True,
            text=True,
            timeout=600,
            env={key: value for key, value in os.environ.items() if key != "PYTHONPATH"},
        )
        whole = time.perf_counter() - began
    if completed.returncode != 0:
        sys.exit(f"{python} failed:\n{completed.stderr[-2000:]}")
    record = json.loads(completed.stdout.strip().splitlines()[-1])
    if record["outcome"] != "PASS":
        sys.exit(f"{python}: the clean case did not PASS: {record}")
    return record["check_seconds"], whole


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per implementation (>= 3)")
    parser.add_argument("--reference-python", default=str(DEFAULT_REFERENCE))
    arguments = parser.parse_args()
    if arguments.runs < 3:
        parser.error("--runs must be at least 3 (medians of >= 3 runs)")
    if not Path(arguments.reference_python).exists():
        parser.error(
            f"{arguments.reference_python} does not exist; create it with "
            "`bash benchmarks/reference_venv.sh`"
        )
    implementations = {"ours": sys.executable, "0.1.0": arguments.reference_python}
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in implementations}
    for run in range(arguments.runs):
        for name, python in implementations.items():
            check, whole = measure(python)
            samples[name].append((check, whole))
            print(f"run {run + 1} {name:>5}: check {check:6.2f} s, process {whole:6.2f} s")
    medians = {
        name: (
            statistics.median(check for check, _ in runs),
            statistics.median(whole for _, whole in runs),
        )
        for name, runs in samples.items()
    }
    for name, (check, whole) in medians.items():
        print(f"median {name:>5}: check {check:6.2f} s, process {whole:6.2f} s")
    print(
        f"ratio ours/0.1.0: check {medians['ours'][0] / medians['0.1.0'][0]:.2f}x, "
        f"process {medians['ours'][1] / medians['0.1.0'][1]:.2f}x (cpu count {os.cpu_count()})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
