"""Fault checks judged against a clean check's baselines: only each fault's resumed phase runs.

A resume check runs four phases: baseline_a and baseline_b (uninterrupted), candidate_split
(to the split step) and candidate_resume (from the split's checkpoint). A fault that acts
only when the script loads a checkpoint (a load_checkpoint option, what the script does
after loading) leaves the first three as the clean check ran them: the same command but
for the fault's flag, which the script reads only on the resumed path. A fault table that
reruns them per fault spends three quarters of its processes on identical runs.

Here a fault's check is planned (`trainparity resume --plan-only DIR`: the very phases,
commands and environment the check would run), the clean check's outputs of those three
phases (run directory and recordings) are copied where the plan's phases leave theirs, each
with the exit status and PID the clean check's report gives it, only candidate_resume.sh
runs, and `trainparity judge DIR` gives the verdict with the check's own decision sequence
(docs/cluster.md, "Any scheduler: plan, run, judge"). The clean check must have passed: its
two baselines then agree exactly, so either is what a rerun would give.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tests.few_at_a_time import Command

# The phases a fault that acts only on loading shares with the clean check.
SHARED_PHASES = ("baseline_a", "baseline_b", "candidate_split")
PHASE_RESULT_FILE = "phase-result.json"  # executors/replay.py: what judge reads of a phase
RECORDINGS = "recordings"


def shared_baseline_checks(
    clean: str, check: Sequence[str], faults: Mapping[str, Sequence[str]], root: Path
) -> tuple[dict[str, Command], dict[str, tuple[str, ...]]]:
    """The commands (and what each waits for) of a clean check and faults judged on its phases.

    `check` is the clean check's `trainparity resume --json` command without --work-dir;
    `faults` gives each fault's command the same way. The clean check runs in `root/clean`
    (its report also in `root/clean.json`); each fault is planned into `root/fault`, its
    candidate_resume run as `resume:fault` once the clean check ended, and judged as
    `fault`, whose stdout is the fault's report: run them with run_a_few_at_a_time.
    """
    report = root / f"{clean}.json"
    commands: dict[str, Command] = {
        clean: with_options(check, "--work-dir", str(root / clean), "--report", str(report))
    }
    after: dict[str, tuple[str, ...]] = {}
    for name, fault in faults.items():
        plan = root / name
        commands[f"plan:{name}"] = with_options(fault, "--plan-only", str(plan))
        commands[f"resume:{name}"] = resumed_phase(root / clean, report, plan)
        commands[name] = judge_command(plan)
        after[f"resume:{name}"] = (clean, f"plan:{name}")
        after[name] = (f"resume:{name}",)
    return commands, after


def resumed_phase(clean: Path, clean_report: Path, plan: Path) -> Callable[[], list[str]]:
    """The command that runs a planned fault's candidate_resume on the clean check's phases.

    Built when it starts (run_a_few_at_a_time calls it), after the clean check ended: it
    copies the clean check's shared phases into the plan, then returns `sh candidate_resume.sh`.
    """

    def command() -> list[str]:
        reuse_clean_phases(clean, json.loads(clean_report.read_text(encoding="utf-8")), plan)
        return ["sh", str(plan / "candidate_resume.sh")]

    return command


def judge_command(plan: Path) -> list[str]:
    return [sys.executable, "-m", "trainparity", "judge", str(plan), "--json", "--no-progress"]


def reuse_clean_phases(clean: Path, report: dict, plan: Path) -> None:
    """Put the clean check's (work dir `clean`) shared phases where `plan`'s phases leave theirs."""
    assert report["outcome"] == "PASS", f"the clean check did not pass: {report['message']}"
    rows = {row["phase"]: row for row in report["processes"]}
    for phase in SHARED_PHASES:
        shutil.copytree(clean / phase, plan / phase)
        if (clean / RECORDINGS / phase).exists():
            shutil.copytree(clean / RECORDINGS / phase, plan / RECORDINGS / phase)
        result = {"exit_code": rows[phase]["returncode"], "pid": rows[phase]["pid"]}
        (plan / phase / PHASE_RESULT_FILE).write_text(json.dumps(result), encoding="utf-8")


def with_options(check: Sequence[str], *options: str) -> list[str]:
    """`check` with more options of trainparity resume (before a command template's `--`)."""
    end = list(check).index("--") if "--" in check else len(check)
    return [*check[:end], *options, *check[end:]]
