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

A fault named in `scripts` runs candidate_resume.sh as a scheduler would (a fresh torchrun
and fresh ranks, then the script's `trainparity env --json`), and is judged by a
`trainparity judge` of its own. The others are judged by `judge_here`: `trainparity judge
--run-missing` in this process runs their candidate_resume as a check would, forked from
this worker's warm servers (one for all of a module's faults), 10 to 15 s of CPU less per
fault with DeepSpeed's ranks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

from tests.cli_here import CLI, cli_here
from tests.few_at_a_time import Command

# The phases a fault that acts only on loading shares with the clean check.
SHARED_PHASES = ("baseline_a", "baseline_b", "candidate_split")
PHASE_RESULT_FILE = "phase-result.json"  # executors/replay.py: what judge reads of a phase
RECORDINGS = "recordings"


def shared_baseline_checks(
    clean: str,
    check: Sequence[str],
    faults: Mapping[str, Sequence[str]],
    root: Path,
    *,
    scripts: Collection[str] = (),
) -> tuple[dict[str, Command], dict[str, tuple[str, ...]]]:
    """The commands (and what each waits for) of a clean check and faults judged on its phases.

    `check` is the clean check's `trainparity resume --json` command without --work-dir;
    `faults` gives each fault's command the same way. The clean check runs in `root/clean`
    (its report also in `root/clean.json`); each fault is planned into `root/fault`. A fault
    in `scripts` has its candidate_resume.sh run as `resume:fault` once the clean check
    ended, and is judged as `fault`, whose stdout is the fault's report: run them with
    run_a_few_at_a_time, then `judge_here` for the other faults.
    """
    unknown = set(scripts) - set(faults)
    assert not unknown, f"scripts names faults that do not exist: {sorted(unknown)}"
    report = root / f"{clean}.json"
    commands: dict[str, Command] = {
        clean: with_options(check, "--work-dir", str(root / clean), "--report", str(report))
    }
    after: dict[str, tuple[str, ...]] = {}
    for name, fault in faults.items():
        plan = root / name
        commands[f"plan:{name}"] = with_options(fault, "--plan-only", str(plan))
        if name in scripts:
            commands[f"resume:{name}"] = resumed_phase(root / clean, report, plan)
            commands[name] = judge_command(plan)
            after[f"resume:{name}"] = (clean, f"plan:{name}")
            after[name] = (f"resume:{name}",)
    return commands, after


def judge_here(
    clean: str, faults: Iterable[str], root: Path, environment: Mapping[str, str]
) -> dict[str, tuple[int, str, str]]:
    """Each fault's (exit code, report, stderr): judged in this process on the clean check's
    shared phases, its candidate_resume run by `trainparity judge --run-missing`.

    Runs after the commands of `shared_baseline_checks` ended. The check sees `environment`
    as its own (the one the commands ran with), so its phases are those the script would
    have run; its children fork from this worker's warm servers. Judge imports the case
    from the project's directory, as a process of its own would (tests/cli_here.py).
    """
    report = json.loads((root / f"{clean}.json").read_text(encoding="utf-8"))
    done: dict[str, tuple[int, str, str]] = {}
    for name in faults:
        plan = root / name
        reuse_clean_phases(root / clean, report, plan)
        project = Path(json.loads((plan / "plan.json").read_text(encoding="utf-8"))["cwd"])
        argv = [*judge_command(plan), "--run-missing"]
        done[name] = cli_here(argv, cwd=project, environment=environment)
    return done


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
    return [*CLI, "judge", str(plan), "--json", "--no-progress"]


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
