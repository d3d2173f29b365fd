"""Whole-process runs of ours and TrainParity 0.1.0, interleaved, and the table of their medians.

Each run is a fresh interpreter running a benchmark's driver (its own
trainparity imported, nothing of the other). Measured per run: the wall time
of the whole process (interpreter start and imports included) and the CPU
time of its whole process tree (every child is reaped by its parent, so
RUSAGE_CHILDREN counts them all). Runs alternate between the variants, so
that load on the shared machine hits all of them alike.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REFERENCE_VENV_SCRIPT = Path(__file__).resolve().parent / "reference_venv.sh"
# Taken out of every run's environment: a variant that wants one sets it itself.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


@dataclass(frozen=True)
class Variant:
    """One row: an interpreter, the runner options its driver passes (ours only), extra variables."""

    label: str
    python: str
    options: Mapping[str, Any] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float
    user: float
    load: float  # the 1-minute load average as the run ended
    record: dict[str, Any]


ORIGINAL = "0.1.0 (sequential)"
OURS = "ours, default"


def table_variants(ours: str, original: str) -> list[Variant]:
    """The rows of issue 28's table: the original, ours one at a time, ours, ours at 1 thread."""
    return [
        Variant(ORIGINAL, original),
        Variant("ours, parallel=False", ours, {"parallel": False}),
        Variant(OURS, ours),
        Variant("ours, default, OMP_NUM_THREADS=1", ours, {}, {"OMP_NUM_THREADS": "1"}),
    ]


def reference_python() -> str:
    """The original's interpreter, from the project's reference-venv script."""
    completed = subprocess.run(
        ["bash", str(REFERENCE_VENV_SCRIPT)], capture_output=True, text=True, check=True
    )
    return completed.stdout.strip().splitlines()[-1]


def run_once(driver: str, variant: Variant, arguments: list[str], cwd: Path) -> Run:
    """One fresh interpreter running `driver` with the variant's options as its first argument."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key != "PYTHONPATH" and key not in THREAD_VARIABLES
    }
    environment.update(variant.environment)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    completed = subprocess.run(
        [variant.python, "-c", driver, json.dumps(dict(variant.options)), *arguments],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if completed.returncode != 0:
        raise RuntimeError(f"{variant.label} failed:\n{completed.stderr[-3000:]}")
    user = after.ru_utime - before.ru_utime
    cpu = user + after.ru_stime - before.ru_stime
    record = json.loads(completed.stdout.strip().splitlines()[-1])
    return Run(wall, cpu, user, os.getloadavg()[0], record)


def measure(
    driver: str,
    variants: list[Variant],
    runs: int,
    arguments: list[str],
    cwd: Path,
    accept: Callable[[dict[str, Any]], str | None],
) -> dict[str, list[Run]]:
    """`runs` interleaved rounds over the variants; `accept` returns why a run's record is wrong."""
    samples: dict[str, list[Run]] = {variant.label: [] for variant in variants}
    for round_number in range(runs):
        for variant in variants:
            run = run_once(driver, variant, arguments, cwd)
            problem = accept(run.record)
            if problem:
                sys.exit(f"{variant.label}: {problem}")
            samples[variant.label].append(run)
            print(
                f"run {round_number + 1} {variant.label:<34} wall {run.wall:6.2f} s, "
                f"cpu {run.cpu:6.2f} s (user {run.user:6.2f} s), load {run.load:.1f}",
                flush=True,
            )
    return samples


def median_table(samples: dict[str, list[Run]]) -> dict[str, tuple[float, float]]:
    """Print the table of each row's medians; return each row's (wall, CPU) medians."""
    rounds = len(next(iter(samples.values())))
    print(f"\nmedians of {rounds} runs each, whole process")
    print("| run | wall | CPU (user + sys) | user CPU |")
    print("| --- | --- | --- | --- |")
    medians = {}
    for label, runs in samples.items():
        wall = statistics.median(run.wall for run in runs)
        cpu = statistics.median(run.cpu for run in runs)
        user = statistics.median(run.user for run in runs)
        medians[label] = (wall, cpu)
        print(f"| {label} | {wall:.2f} s | {cpu:.2f} s | {user:.2f} s |")
    return medians


def print_load(samples: dict[str, list[Run]]) -> None:
    """The usable cores and the load average while measuring: what the figures are worth."""
    loads = [run.load for runs in samples.values() for run in runs]
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"usable cores {usable}; 1-minute load average while measuring: "
        f"min {min(loads):.1f}, median {statistics.median(loads):.1f}, max {max(loads):.1f}"
    )


def report(samples: dict[str, list[Run]], *, wall_target: float, cpu_target: float) -> bool:
    """Print the medians table and the targets (ours default / original); True when both are met."""
    medians = median_table(samples)
    wall_ratio = medians[OURS][0] / medians[ORIGINAL][0]
    cpu_ratio = medians[OURS][1] / medians[ORIGINAL][1]
    wall_met, cpu_met = wall_ratio <= wall_target, cpu_ratio <= cpu_target
    print(
        f"\nours default / 0.1.0: wall {wall_ratio:.2f}x (target <= {wall_target}: "
        f"{'met' if wall_met else 'NOT met'}), cpu {cpu_ratio:.2f}x (target <= {cpu_target}: "
        f"{'met' if cpu_met else 'NOT met'})"
    )
    print_load(samples)
    return wall_met and cpu_met


def report_children(samples: dict[str, list[Run]], one_at_a_time: str, target: float) -> bool:
    """Print the children's CPU, ours by default against `one_at_a_time`; True when within target.

    The runs' records carry `children_cpu` (the driver's RUSAGE_CHILDREN: the check's
    children only, not the driver's own imports and comparison).
    """
    at_once = statistics.median(run.record["children_cpu"] for run in samples[OURS])
    serial = statistics.median(run.record["children_cpu"] for run in samples[one_at_a_time])
    ratio = at_once / serial
    met = ratio <= target
    print(
        f"children's CPU, {OURS} / {one_at_a_time}: {at_once:.2f} s / {serial:.2f} s = "
        f"{ratio:.2f}x (target <= {target}: {'met' if met else 'NOT met'})"
    )
    return met
