"""Benchmarks multi-rank support: check_resume on the distributed example, record_ids, ID audits.

Run from the repository root with trainparity installed:

    python benchmarks/bench_distributed.py [--runs 3] [--skip-resume]

Part 1 (medians over --runs rounds, the three measurements alternating within
a round so that load on the machine hits them alike): the wall time of
check_resume on docs/examples/distributed_project (four torchrun phases of 2
ranks, observer, comparison), of the same four torchrun phases run one after
another by hand (baseline_a, baseline_b, split, resume), and of the critical
path by hand (split, then resume). Targets: check <= 0.6 x sequential, check
<= 1.3 x critical path.

Part 2: record_ids overhead per rank: 10M IDs recorded in batches of
--batch (default 1024) int64 tensors, as a rank records what its loader
yields; median of 5, flushing included. Target <= 50 ms.

Part 3: audit of 8 ranks x 12.5M IDs recorded to files (a random permutation
of 100M, one file per rank) against ExactlyOnce(range(100M)) with
audit_recorded_ids; median of 3. Target <= 3 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy
import torch
from trainparity import ExactlyOnce, Outcome, check_resume, record_ids
from trainparity._internal.coverage.recorded_ids import audit_recorded_ids
from trainparity._internal.recording.record_ids import _close_all, ids_file_name
from trainparity.distributed import torchrun_command

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "distributed_project"
ENVIRONMENT = {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def _phase(directory: Path, name: str, end_step: int, resume_from: Path | None = None) -> Path:
    run_dir = directory / name
    run_dir.mkdir(parents=True)
    script = [str(EXAMPLE / "train.py"), "--checkpoint", str(run_dir / "checkpoint")]
    script += ["--end-step", str(end_step)]
    if resume_from is not None:
        script += ["--resume", str(resume_from)]
    argv = torchrun_command(script, nproc_per_node=2, log_dir=run_dir / "ranks")
    subprocess.run(
        argv,
        env={**os.environ, **ENVIRONMENT, "TMPDIR": str(run_dir)},
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=600,
    )
    return run_dir / "checkpoint"


def _by_hand(phases: list[str]) -> float:
    directory = Path(tempfile.mkdtemp(prefix="trainparity-bench-"))
    try:
        began = time.perf_counter()
        for name in phases:
            if name == "candidate_split":
                split = _phase(directory, name, 1)
            elif name == "candidate_resume":
                _phase(directory, name, 4, resume_from=split)
            else:
                _phase(directory, name, 4)
        return time.perf_counter() - began
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _check() -> float:
    sys.path.insert(0, str(EXAMPLE))
    try:
        began = time.perf_counter()
        result = check_resume(
            "parity_case:DistributedResumeCase", cwd=EXAMPLE, environment=ENVIRONMENT
        )
        seconds = time.perf_counter() - began
    finally:
        sys.path.remove(str(EXAMPLE))
    if result.outcome is not Outcome.PASS:
        raise SystemExit(f"check_resume did not PASS: {result.message}")
    return seconds


def bench_resume(runs: int) -> None:
    sequential = ["baseline_a", "baseline_b", "candidate_split", "candidate_resume"]
    measured: dict[str, list[float]] = {"check": [], "sequential": [], "critical": []}
    for _round in range(runs):
        measured["check"].append(_check())
        measured["sequential"].append(_by_hand(sequential))
        measured["critical"].append(_by_hand(["candidate_split", "candidate_resume"]))
        print({key: [round(value, 1) for value in values] for key, values in measured.items()})
    median = {key: statistics.median(values) for key, values in measured.items()}
    print(
        f"check_resume {median['check']:.1f} s; by hand: four phases one after another "
        f"{median['sequential']:.1f} s, split -> resume {median['critical']:.1f} s"
    )
    print(
        f"ratios: check / sequential = {median['check'] / median['sequential']:.2f} "
        f"(target <= 0.6); check / critical path = {median['check'] / median['critical']:.2f} "
        "(target <= 1.3)"
    )


def bench_record_ids(total: int, batch: int) -> None:
    batches = [torch.arange(start, min(start + batch, total)) for start in range(0, total, batch)]
    times, cpu = [], []
    for _round in range(5):
        directory = Path(tempfile.mkdtemp(prefix="trainparity-bench-"))
        try:
            began, began_cpu = time.perf_counter(), time.process_time()
            for ids in batches:
                record_ids(ids, epoch=0, directory=directory, rank=0)
            _close_all()
            times.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
            assert (directory / ids_file_name(0, 0)).stat().st_size == 8 * total
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    print(
        f"record_ids: {total:,} IDs in batches of {batch}: median {statistics.median(times) * 1e3:.1f} ms "
        f"per rank, CPU {statistics.median(cpu) * 1e3:.1f} ms "
        f"(runs: {', '.join(f'{t * 1e3:.1f}' for t in times)}; target <= 50 ms)"
    )


def bench_audit(ranks: int, per_rank: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="trainparity-bench-"))
    try:
        permutation = numpy.random.default_rng(0).permutation(ranks * per_rank).astype("<i8")
        for rank in range(ranks):
            share = permutation[rank * per_rank : (rank + 1) * per_rank]
            share.tofile(directory / ids_file_name(rank, 0))
        del permutation
        times, cpu = [], []
        for _round in range(3):
            began, began_cpu = time.perf_counter(), time.process_time()
            results = audit_recorded_ids(directory, policy=ExactlyOnce(range(ranks * per_rank)))
            times.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
            assert results[0].outcome == "PASS", results[0].message
        print(
            f"audit of {ranks} ranks x {per_rank:,} IDs from files: median "
            f"{statistics.median(times):.2f} s, CPU {statistics.median(cpu):.2f} s "
            f"(runs: {', '.join(f'{t:.2f}' for t in times)}; "
            "target <= 3 s)"
        )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--skip-resume", action="store_true")
    arguments = parser.parse_args()
    bench_record_ids(10_000_000, arguments.batch)
    bench_audit(8, 12_500_000)
    if not arguments.skip_resume:
        bench_resume(arguments.runs)


if __name__ == "__main__":
    main()
