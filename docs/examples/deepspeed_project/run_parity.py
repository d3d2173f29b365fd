"""Run DeepSpeed resume checks; exit 0 when every one PASSes.

Usage: DS_ACCELERATOR=cpu python run_parity.py [CaseClass]...   (default: DeepSpeedResumeCase)

Each check writes trainparity-report-<case>.json here. DeepSpeed builds its
shm comm op with g++ on a rank's first init_distributed (a minute or two,
once per $TORCH_EXTENSIONS_DIR).
"""

import os
import shutil
import sys
from pathlib import Path

from trainparity import Outcome, check_resume

root = Path(__file__).resolve().parent


def check(case: str) -> Outcome:
    work_dir = root / ".trainparity-runs" / case
    shutil.rmtree(work_dir, ignore_errors=True)  # nothing of an earlier run (its checkpoints) stays
    result = check_resume(
        f"parity_case:{case}",
        cwd=root,
        work_dir=work_dir,
        report_path=root / f"trainparity-report-{case}.json",
        # CPU ranks on gloo, one thread each.
        environment={"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"},
        progress=True,
    )
    print(case, result.outcome.value, result.message)
    for difference in result.all_differences[:5]:
        print(
            f"  {difference.path}: {difference.reason} ({difference.baseline} vs {difference.candidate})"
        )
    return result.outcome


if __name__ == "__main__":
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    outcomes = [check(case) for case in sys.argv[1:] or ["DeepSpeedResumeCase"]]
    sys.exit(0 if all(outcome is Outcome.PASS for outcome in outcomes) else 1)
