"""Benchmark: what the SLURM executor and the command-template case cost.

1. Per phase, on a SLURM cluster: one training phase (the resume quickstart's
   worker, to its last step) submitted by the executor and awaited until the
   job ended, against the same command submitted by hand with
   `sbatch --wait`. Target: the executor adds <= 1.0 s per phase.
2. Locally: check_resume on the quickstart's clean case as a case class and
   as the equivalent command template (CommandCase). Target: <= 1.05x.

Medians of interleaved runs. The cluster is the one SLURM_CONF names, else
the tests' single-node cluster (tests/slurm_cluster.py) started for the run.

    python benchmarks/bench_executors.py [--runs 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OVERHEAD_TARGET_SECONDS = 1.0
TEMPLATE_TARGET = 1.05
WORKER = [sys.executable, "-m", "trainparity.quickstarts.resume", "worker", "--end-step", "4"]
TEMPLATE = [*WORKER[:-2], "--run-dir", "{run_dir}", "--end-step", "{end_step}"]


@contextlib.contextmanager
def cluster() -> Iterator[None]:
    if os.environ.get("SLURM_CONF"):
        yield
        return
    sys.path.insert(0, str(REPO))
    from tests.slurm_cluster import slurm_cluster

    with slurm_cluster() as started:
        print(f"test cluster started in {started.start_seconds:.2f} s", flush=True)
        saved = dict(os.environ)
        os.environ.update(started.environment)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)


def by_hand(directory: Path) -> None:
    argv = " ".join([*WORKER, "--run-dir", str(directory)])
    subprocess.run(
        ["sbatch", "--wait", "--quiet", "-o", str(directory / "out.log"), "--wrap", argv],
        check=True,
        timeout=600,
    )


def by_executor(directory: Path) -> None:
    from trainparity._internal.processes.group import ChildSpec
    from trainparity._internal.processes.progress import ProgressReporter
    from trainparity.executors import SlurmExecutor

    launcher = SlurmExecutor(poll_seconds=0.1).launcher(
        run_root=directory, on_event=lambda *_: None, progress=ProgressReporter(None)
    )
    spec = ChildSpec(
        name="phase",
        argv=[*WORKER, "--run-dir", str(directory)],
        cwd=directory,
        env=dict(os.environ),
        stdout_path=directory / "stdout.log",
        stderr_path=directory / "stderr.log",
    )
    try:
        launcher.start(spec, timeout=600)
        result = launcher.wait_for("phase")
    finally:
        launcher.close()
    assert result is not None and result.job_state == "COMPLETED", result


def interleaved(actions: dict[str, Callable[[Path], None]], runs: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {name: [] for name in actions}
    for _ in range(runs + 1):  # the first round warms caches up and is not counted
        for name, action in actions.items():
            with tempfile.TemporaryDirectory(prefix="bench-executors-") as directory:
                began = time.perf_counter()
                action(Path(directory))
                samples[name].append(time.perf_counter() - began)
    return {name: times[1:] for name, times in samples.items()}


def case_class(directory: Path) -> None:
    from trainparity import check_resume

    result = check_resume("trainparity.quickstarts.resume:CleanCase", temporary_root=directory)
    assert result.outcome == "PASS", result.message


def command_template(directory: Path) -> None:
    from trainparity import check_resume
    from trainparity._internal.cases.command_case import CommandCase

    case = CommandCase(
        template=[*TEMPLATE, "--resume-from", "{resume_from?}"],
        checkpoint="{run_dir}/checkpoint.pt",
        split_step=2,
        total_step=4,
    )
    result = check_resume(case, temporary_root=directory)
    assert result.outcome == "PASS", result.message


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    arguments = parser.parse_args()
    with cluster():
        phases = interleaved(
            {"sbatch --wait": by_hand, "SlurmExecutor": by_executor}, arguments.runs
        )
    cases = interleaved(
        {"case class": case_class, "command template": command_template}, arguments.runs
    )
    medians = {name: statistics.median(times) for name, times in {**phases, **cases}.items()}
    for name, seconds in medians.items():
        print(
            f"{name:18} median {seconds:7.2f} s  ({', '.join(f'{t:.2f}' for t in {**phases, **cases}[name])})"
        )
    overhead = medians["SlurmExecutor"] - medians["sbatch --wait"]
    ratio = medians["command template"] / medians["case class"]
    print(f"executor overhead per phase: {overhead:+.2f} s (target <= {OVERHEAD_TARGET_SECONDS} s)")
    print(f"command template / case class: {ratio:.3f}x (target <= {TEMPLATE_TARGET}x)")
    return 0 if overhead <= OVERHEAD_TARGET_SECONDS and ratio <= TEMPLATE_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
