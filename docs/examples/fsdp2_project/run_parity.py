"""Run the FSDP2 resume check (check_runs for a case with variants); exit 0 on PASS.

Usage: python run_parity.py [CaseClass] [2,1]

`2,1` saves on 2 ranks and resumes on 1 (an elastic resume),
compared under a tolerance: two world sizes sum the gradients in another order.
"""

import shutil
import sys
from pathlib import Path

import parity_case
from trainparity import Outcome, ToleranceComparison, check_resume, check_runs

root = Path(__file__).resolve().parent
arguments = sys.argv[1:]
sizes = [argument for argument in arguments if "," in argument]
named = [argument for argument in arguments if "," not in argument]
case = named[0] if named else "FsdpResumeCase"
world_sizes = tuple(int(size) for size in sizes[0].split(",")) if sizes else None
label = case + ("" if world_sizes is None else "-" + "-".join(map(str, world_sizes)))
work_dir = root / ".trainparity-runs" / label
shutil.rmtree(work_dir, ignore_errors=True)  # recordings of an earlier run would collide
options = {
    "cwd": root,
    "work_dir": work_dir,
    "report_path": root / f"trainparity-report-{label}.json",
    "environment": {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"},  # one thread per rank
    "progress": True,
}
# Another rank count sums the gradients in another order: compared under a tolerance.
tolerance = ToleranceComparison(rtol=1e-4, atol=1e-6)
if hasattr(getattr(parity_case, case), "variants"):
    result = check_runs(f"parity_case:{case}", comparison=tolerance, **options)
else:
    result = check_resume(
        f"parity_case:{case}",
        comparison=None if world_sizes is None else tolerance,
        world_sizes=world_sizes,
        **options,
    )
print(result.outcome.value, result.message)
for difference in result.all_differences[:5]:
    print(
        f"  {difference.path}: {difference.reason} ({difference.baseline} vs {difference.candidate})"
    )
sys.exit(0 if result.outcome is Outcome.PASS else 1)
