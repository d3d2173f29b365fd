"""Run the resume parity check; exit 0 on PASS. Usage: python run_parity.py [CaseClass]"""

import sys
from pathlib import Path

from trainparity import ExactComparison, Outcome, check_resume

root = Path(__file__).resolve().parent  # holds parity_case.py: on sys.path as the script's folder
case = sys.argv[1] if len(sys.argv) > 1 else "ResumeCase"
result = check_resume(
    f"parity_case:{case}",  # "module:Class", imported here, in this process
    comparison=ExactComparison(),  # the default; ToleranceComparison(rtol=..., atol=...) allows drift
    cwd=root,  # each phase's command runs here: plan.cwd
    work_dir=root / ".trainparity-runs" / case,  # keep checkpoints, logs and recordings
    report_path=root / f"trainparity-report-{case}.json",  # or .html: a page to read
    progress=True,
)
print(result.outcome.value, result.message)
for difference in result.all_differences[:5]:
    print(
        f"  {difference.path}: {difference.reason} ({difference.baseline} vs {difference.candidate})"
    )
sys.exit(0 if result.outcome is Outcome.PASS else 1)
