"""Benchmark: the accumulation quickstart's clean case, ours vs TrainParity 0.1.0, same run.

Each measurement is a fresh interpreter (ours: this Python; the original: the
reference venv's Python, see benchmarks/reference_venv.sh) running a small
driver that imports its own trainparity and calls check_accumulation on the
quickstart's `Case` with the quickstart's clean plan and tolerance. Three
figures per run: the check's own wall time (measured inside the driver), the
whole process's wall time (interpreter start and imports included), and the
CPU time (user + system) of the whole process tree, which says how much of
the machine a check takes whatever else runs on it. Runs alternate between
the two implementations so that load on the machine hits both alike;
medians and the ratios ours / original are printed.

    python benchmarks/bench_accumulation.py [--runs 5] [--reference-python PATH]

Without --reference-python the original's interpreter comes from
benchmarks/reference_venv.sh (creating that venv on first use; set
TRAINPARITY_REFERENCE_VENV to reuse one elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REFERENCE_VENV_SCRIPT = Path(__file__).resolve().parent / "reference_venv.sh"

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


def measure(python: str) -> tuple[float, float, float]:
    """(check seconds, whole-process seconds, CPU seconds of the process tree) of one driver run."""
    with tempfile.TemporaryDirectory(prefix="bench-accumulation-") as empty:
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # Every worker is reaped by its driver, and the driver by us: all of it is counted here.
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    if completed.returncode != 0:
        sys.exit(f"{python} failed:\n{completed.stderr[-2000:]}")
    record = json.loads(completed.stdout.strip().splitlines()[-1])
    if record["outcome"] != "PASS":
        sys.exit(f"{python}: the clean case did not PASS: {record}")
    return record["check_seconds"], whole, cpu


def reference_python() -> str:
    """The original's interpreter, from the project's reference-venv script."""
    completed = subprocess.run(
        ["bash", str(REFERENCE_VENV_SCRIPT)], capture_output=True, text=True, check=True
    )
    return completed.stdout.strip().splitlines()[-1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per implementation (>= 3)")
    parser.add_argument("--reference-python", help="python of a venv with trainparity==0.1.0")
    arguments = parser.parse_args()
    if arguments.runs < 3:
        parser.error("--runs must be at least 3 (medians of >= 3 runs)")
    reference = arguments.reference_python or reference_python()
    if not Path(reference).exists():
        parser.error(f"{reference} does not exist")
    implementations = {"ours": sys.executable, "0.1.0": reference}
    samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in implementations}
    for run in range(arguments.runs):
        for name, python in implementations.items():
            check, whole, cpu = measure(python)
            samples[name].append((check, whole, cpu))
            print(
                f"run {run + 1} {name:>5}: check {check:6.2f} s, "
                f"process {whole:6.2f} s, cpu {cpu:6.2f} s"
            )
    medians = {
        name: tuple(statistics.median(figures) for figures in zip(*runs, strict=True))
        for name, runs in samples.items()
    }
    for name, (check, whole, cpu) in medians.items():
        print(f"median {name:>5}: check {check:6.2f} s, process {whole:6.2f} s, cpu {cpu:6.2f} s")
    ours, original = medians["ours"], medians["0.1.0"]
    print(
        f"ratio ours/0.1.0: check {ours[0] / original[0]:.2f}x, "
        f"process {ours[1] / original[1]:.2f}x, cpu {ours[2] / original[2]:.2f}x "
        f"(cpu count {os.cpu_count()}, load average {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
