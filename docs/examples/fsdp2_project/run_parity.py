"""Run FSDP2 resume checks (check_runs for a case with variants); exit 0 when every one PASSes.

Usage: python run_parity.py [CaseClass [2,1 | dp4:dp2xtp2]]... [--fork-ranks]

`2,1` after a case saves on 2 ranks and resumes on 1 (an elastic resume);
`dp4:dp2xtp2` saves on one layout and resumes on another (check_resume's
`layouts`). Both are compared under a tolerance: another world size or mesh
sums the gradients in another order.
Several cases run one after the other in this process (its imports paid
once), each writing trainparity-report-<case>[-2-1].json here; with
TRAINPARITY_START=warm they also share their warm servers (each imports
torch and torch._dynamo once for all the checks, not once per check).
`--fork-ranks` starts each phase's ranks by forking one process instead of
through torchrun (parity_case.py): the same training, cheaper to start.
"""

import os
import shutil
import sys
from pathlib import Path

import parity_case
from trainparity import Outcome, ToleranceComparison, check_resume, check_runs, shared_warm_servers

root = Path(__file__).resolve().parent
# Another rank count sums the gradients in another order: compared under a tolerance.
tolerance = ToleranceComparison(rtol=1e-4, atol=1e-6)
# The phases' temporary files (torch's compile cache directory, made on importing
# torch._dynamo, which fully_shard does) go beside the runs, and away when this process's
# checks are done. One directory for all of them: their phases' environments are then
# alike, so they share warm servers.
temporary = root / ".trainparity-runs" / f"tmp-{os.getpid()}"


def check(case: str, resharding: tuple | None) -> Outcome:
    label = case + ("" if resharding is None else "-" + "-".join(map(str, resharding)))
    by_layout = resharding is not None and isinstance(resharding[0], str)
    world_sizes = None if by_layout else resharding
    work_dir = root / ".trainparity-runs" / label
    shutil.rmtree(work_dir, ignore_errors=True)  # nothing of an earlier run (its checkpoints) stays
    temporary.mkdir(parents=True, exist_ok=True)
    options = {
        "cwd": root,
        "work_dir": work_dir,
        "report_path": root / f"trainparity-report-{label}.json",
        # One thread per rank.
        "environment": {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0", "TMPDIR": str(temporary)},
        "progress": True,
    }
    if hasattr(getattr(parity_case, case), "variants"):
        result = check_runs(f"parity_case:{case}", comparison=tolerance, **options)
    else:
        result = check_resume(
            f"parity_case:{case}",
            comparison=None if resharding is None else tolerance,
            world_sizes=world_sizes,
            layouts=resharding if by_layout else None,
            **options,
        )
    print(label, result.outcome.value, result.message)
    for difference in result.all_differences[:5]:
        print(
            f"  {difference.path}: {difference.reason} ({difference.baseline} vs {difference.candidate})"
        )
    return result.outcome


def requested(arguments: list[str]) -> list[tuple[str, tuple | None]]:
    """(case, world sizes or layouts) pairs: a `2,1` or `dp4:dp2xtp2` belongs to the case before it."""
    checks: list[tuple[str, tuple | None]] = []
    for argument in arguments:
        if "," in argument or ":" in argument:
            case = checks.pop()[0] if checks else "FsdpResumeCase"
            if ":" in argument:
                checks.append((case, tuple(argument.split(":"))))
            else:
                checks.append((case, tuple(int(size) for size in argument.split(","))))
        else:
            checks.append((argument, None))
    return checks or [("FsdpResumeCase", None)]


if __name__ == "__main__":
    if "--fork-ranks" in sys.argv[1:]:
        os.environ[parity_case.LAUNCHER_VARIABLE] = "fork"  # read by the case's command()
    checks = requested([argument for argument in sys.argv[1:] if argument != "--fork-ranks"])
    with shared_warm_servers():
        outcomes = [check(case, resharding) for case, resharding in checks]
    shutil.rmtree(temporary, ignore_errors=True)
    sys.exit(0 if all(outcome is Outcome.PASS for outcome in outcomes) else 1)
