"""Stress: many concurrent 2-rank torchrun jobs on loopback; counts the jobs that hang or fail.

Each job is `python -m torch.distributed.run --nnodes=1 --nproc-per-node=2`
running a tiny gloo program (init_process_group, all_reduce, a DCP save and
load, barrier, destroy). Jobs run `--concurrency` at a time, `--jobs` in all,
each in its own process group (trainparity's ChildGroup), killed with every
rank after `--timeout` seconds: a killed job is a hang. Modes:

- `standalone`: `--standalone` (what users write);
- `ours`: the argv of `trainparity.distributed.torchrun_command`.

    python benchmarks/stress_torchrun.py --mode standalone --jobs 40 --concurrency 8

Prints one JSON line: runs, hangs, failures (nonzero exit), wall seconds, and
for every bad job the last stderr lines. Only loopback is used; nothing is
left behind (the scratch directory is removed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from trainparity.distributed import torchrun_command
from trainparity.processes import ChildGroup, ChildSpec

WORKER = """
import os, sys, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
dist.init_process_group("gloo")
rank = dist.get_rank()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
assert value.item() == 3.0, value
state = {"weights": torch.full((4,), float(rank)) if rank == 0 else torch.zeros(4)}
dcp.save(state, checkpoint_id=sys.argv[1])
loaded = {"weights": torch.empty(4)}
dcp.load(loaded, checkpoint_id=sys.argv[1])
dist.barrier()
dist.destroy_process_group()
"""


def job_argv(mode: str, script: Path, checkpoint: Path) -> list[str]:
    if mode == "standalone":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(script),
            str(checkpoint),
        ]
    return torchrun_command([str(script), str(checkpoint)], nproc_per_node=2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("standalone", "ours"), default="standalone")
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--timeout", type=float, default=90.0)
    arguments = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="trainparity-stress-"))
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "LOGLEVEL": "WARNING"}
    began = time.perf_counter()
    hangs, failures, walls = [], [], []
    try:
        script = scratch / "worker.py"
        script.write_text(WORKER)
        launched = 0
        with ChildGroup(grace=2.0) as group:
            while launched < arguments.jobs or group.running_names():
                while (
                    launched < arguments.jobs and len(group.running_names()) < arguments.concurrency
                ):
                    name = f"job{launched:04d}"
                    job_dir = scratch / name
                    job_dir.mkdir()
                    spec = ChildSpec(
                        name=name,
                        argv=job_argv(arguments.mode, script, job_dir / "checkpoint"),
                        cwd=scratch,
                        env=environment,
                        stdout_path=job_dir / "stdout.log",
                        stderr_path=job_dir / "stderr.log",
                    )
                    group.start(spec, timeout=arguments.timeout)
                    launched += 1
                for result in group.wait(None):
                    walls.append(result.wall_seconds)
                    tail = (scratch / result.name / "stderr.log").read_text(errors="replace")
                    record = {"job": result.name, "stderr_tail": tail.splitlines()[-6:]}
                    if result.timed_out:
                        hangs.append(record)
                    elif result.exit_code != 0:
                        failures.append(record)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    walls.sort()
    print(
        json.dumps(
            {
                "mode": arguments.mode,
                "runs": arguments.jobs,
                "concurrency": arguments.concurrency,
                "hangs": len(hangs),
                "failures": len(failures),
                "median_job_seconds": round(walls[len(walls) // 2], 2) if walls else None,
                "max_job_seconds": round(walls[-1], 2) if walls else None,
                "wall_seconds": round(time.perf_counter() - began, 1),
                "bad_jobs": hangs + failures,
            },
            indent=1,
        )
    )
    return 0 if not hangs and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
