"""Run the resume parity check; exit 0 on PASS. Usage: python run_parity.py [CaseClass]"""

import sys
from pathlib import Path

from trainparity import Outcome, check_resume

root = Path(__file__).resolve().parent
case = sys.argv[1] if len(sys.argv) > 1 else "DistributedResumeCase"
result = check_resume(
    f"parity_case:{case}",
    cwd=root,
    work_dir=root / ".trainparity-runs" / case,
    report_path=root / f"trainparity-report-{case}.json",
    environment={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},  # one thread per rank
    progress=True,
)
print(result.outcome.value, result.message)
for difference in result.all_differences[:5]:
    print(
        f"  {difference.path}: {difference.reason} ({difference.baseline} vs {difference.candidate})"
    )
sys.exit(0 if result.outcome is Outcome.PASS else 1)
