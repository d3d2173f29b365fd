"""Stress: many concurrent 2-rank torchrun jobs on loopback; counts the jobs that hang or fail.

Each job is `python -m torch.distributed.run --nnodes=1 --nproc-per-node=2`
running either a tiny gloo program (`--program tiny`: init_process_group,
all_reduce, a DCP save and load, barrier, destroy) or the distributed guide's
train.py up to its split step (`--program example`: DDP, DistributedSampler,
DCP save, per-rank RNG files, record_ids). Every rank dumps all its threads'
stacks to its stderr if it is still running after `--dump-after` seconds, so
a hang shows where it waits. Jobs run `--concurrency` at a time, `--jobs` in all,
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
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from trainparity._internal.distributed.phases import PHASE_TAG_VARIABLE, sweep, tagged_processes
from trainparity._internal.processes.group import ChildGroup, ChildSpec
from trainparity.distributed import torchrun_command

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "distributed_project"

# Runs the program with all Python stacks dumped after --dump-after seconds.
RUNNER = """
import faulthandler, runpy, sys
faulthandler.dump_traceback_later(float(sys.argv[1]), exit=False)
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""

TINY = """
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


def job_argv(arguments: argparse.Namespace, runner: Path, program: list[str]) -> list[str]:
    script = [str(runner), str(arguments.dump_after), *program]
    if arguments.mode == "standalone":
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            *script,
        ]
    return torchrun_command(script, nproc_per_node=2)


def program_argv(arguments: argparse.Namespace, scratch: Path, job_dir: Path) -> list[str]:
    if arguments.program == "tiny":
        return [str(scratch / "tiny.py"), str(job_dir / "checkpoint")]
    return [
        str(EXAMPLE / "train.py"),
        "--checkpoint",
        str(job_dir / "checkpoint"),
        "--end-step",
        "1",
    ]


def _native_stacks_of_lingering_ranks(scratch: Path, tag_prefix: str, running: list[str]) -> None:
    """gdb backtraces (all threads) of ranks still alive 20 s after writing their RNG file.

    Such a rank has done all its work; a rank hung while holding the GIL cannot
    run a Python watchdog, so its stacks are taken from outside, once per job.
    """
    for name in running:
        job_dir = scratch / name
        if list(job_dir.glob("gdb-*.txt")):
            continue
        done = [path.stat().st_mtime for path in (job_dir / "checkpoint").glob("rng-rank*.pt")]
        if not done or time.time() - max(done) < 20:
            continue
        for pid in tagged_processes(tag_prefix + name):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"train.py" not in command:
                continue
            with open(job_dir / f"gdb-{pid}.txt", "w") as out:
                subprocess.run(
                    ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=120,
                    check=False,
                )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("standalone", "ours"), default="standalone")
    parser.add_argument("--jobs", type=int, default=24)
    parser.add_argument("--concurrency", type=int, default=6)
    parser.add_argument("--program", choices=("tiny", "example"), default="example")
    parser.add_argument("--timeout", type=float, default=150.0)
    parser.add_argument("--dump-after", type=float, default=100.0)
    parser.add_argument(
        "--keep-bad", type=Path, metavar="DIR", help="copy the directories of bad jobs here"
    )
    arguments = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="trainparity-stress-"))
    # torchrun without --log-dir leaves a mkdtemp directory per job: keep them in scratch.
    environment = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "LOGLEVEL": "WARNING",
        "TMPDIR": str(scratch),
    }
    tag = uuid.uuid4().hex
    began = time.perf_counter()
    hangs, failures, walls = [], [], []
    try:
        runner = scratch / "runner.py"
        runner.write_text(RUNNER)
        (scratch / "tiny.py").write_text(TINY)
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
                        argv=job_argv(arguments, runner, program_argv(arguments, scratch, job_dir)),
                        cwd=scratch,
                        env={**environment, PHASE_TAG_VARIABLE: f"{tag}-{name}"},
                        stdout_path=job_dir / "stdout.log",
                        stderr_path=job_dir / "stderr.log",
                    )
                    group.start(spec, timeout=arguments.timeout)
                    launched += 1
                _native_stacks_of_lingering_ranks(scratch, f"{tag}-", group.running_names())
                for result in group.wait(5.0):
                    sweep(f"{tag}-{result.name}")  # ranks live in their own sessions
                    walls.append(result.wall_seconds)
                    tail = (scratch / result.name / "stderr.log").read_text(errors="replace")
                    record = {
                        "job": result.name,
                        "seconds": round(result.wall_seconds, 1),
                        "stderr_tail": tail.splitlines()[-12:],
                    }
                    if result.timed_out:
                        hangs.append(record)
                    elif result.exit_code != 0:
                        failures.append(record)
                    if arguments.keep_bad and (result.timed_out or result.exit_code != 0):
                        shutil.copytree(scratch / result.name, arguments.keep_bad / result.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    walls.sort()
    print(
        json.dumps(
            {
                "mode": arguments.mode,
                "program": arguments.program,
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
