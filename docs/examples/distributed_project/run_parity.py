"""Run resume parity checks; exit 0 when every one PASSes.

Usage: python run_parity.py [CaseClass ...]   (default: DistributedResumeCase)

Several cases run one after the other in this process (its imports paid
once), each writing trainparity-report-<case>.json here; with
TRAINPARITY_START=warm they also share their warm servers (each imports torch
once for all the checks, not once per check).
"""

import sys
from pathlib import Path

from trainparity import Outcome, check_resume, shared_warm_servers

root = Path(__file__).resolve().parent


def check(case: str) -> Outcome:
    result = check_resume(
        f"parity_case:{case}",
        cwd=root,
        work_dir=root / ".trainparity-runs" / case,
        report_path=root / f"trainparity-report-{case}.json",
        environment={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},  # one thread per rank
        progress=True,
    )
    print(case, result.outcome.value, result.message)
    for difference in result.all_differences[:5]:
        print(
            f"  {difference.path}: {difference.reason} ({difference.baseline} vs {difference.candidate})"
        )
    return result.outcome


if __name__ == "__main__":
    with shared_warm_servers():
        outcomes = [check(case) for case in sys.argv[1:] or ["DistributedResumeCase"]]
    sys.exit(0 if all(outcome is Outcome.PASS for outcome in outcomes) else 1)
