"""What reuse_baselines saves on a fault table (issue 52), as a ratio of total wall times.

    python benchmarks/bench_reuse_baselines.py [--start fresh|warm]

The fault table is tests/fixtures/fault_table_train.py's: one tiny case and
its faulty resumes (each forgets the scheduler, the momentum or the step),
checked one after another, once without reuse and once with a fresh
baseline cache (the first check fills it, the others reuse it). Every faulty
check must FAIL the same way both times. Prints each check's wall time and
the ratio of the totals; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "python"))

from trainparity import CommandCase, check_resume  # noqa: E402

SCRIPT = REPOSITORY / "tests" / "fixtures" / "fault_table_train.py"
FAULTS = ("--resume-without-scheduler", "--resume-without-momentum", "--resume-without-step")


def _case(fault: str) -> CommandCase:
    return CommandCase(
        template=[
            "python",
            "train.py",
            "--checkpoint",
            "{checkpoint}",
            "--end-step",
            "{end_step}",
            "--phase",
            "{phase}",
            fault,
            "{resume_from?}",
        ],
        checkpoint="{run_dir}/checkpoint.pt",
        split_step=2,
        total_step=4,
    )


def _table(project: Path, start: str, cache: Path | None) -> tuple[list[float], list[str]]:
    walls, verdicts = [], []
    for fault in FAULTS:
        began = time.perf_counter()
        result = check_resume(
            _case(fault), cwd=project, start=start, reuse_baselines=cache or False
        )
        walls.append(time.perf_counter() - began)
        verdicts.append(f"{result.outcome.value}: {result.message}")
        reused = result.baselines_reused or {}
        print(f"  {fault:30s} {walls[-1]:6.2f} s  {result.outcome.value}  {reused}", flush=True)
    return walls, verdicts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--start", choices=("fresh", "warm"), default="fresh")
    arguments = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="bench-reuse-") as scratch:
        project = Path(scratch) / "project"
        project.mkdir()
        shutil.copy(SCRIPT, project / "train.py")
        print(f"without reuse ({arguments.start} start):")
        plain, plain_verdicts = _table(project, arguments.start, None)
        print(f"with reuse ({arguments.start} start, an empty cache):")
        reused, reused_verdicts = _table(project, arguments.start, Path(scratch) / "cache")
    if plain_verdicts != reused_verdicts:
        print("verdicts differ with reuse:", plain_verdicts, reused_verdicts)
        return 1
    print(
        f"{len(FAULTS)} faulty checks: {sum(plain):.2f} s without reuse, {sum(reused):.2f} s "
        f"with reuse: {sum(plain) / sum(reused):.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
