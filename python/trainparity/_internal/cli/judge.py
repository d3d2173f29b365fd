"""`trainparity judge DIR`: the verdict on phases that ran elsewhere, from `resume --plan-only DIR`."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """\
trainparity resume --plan-only plan --split-step 2 --total-step 4 --checkpoint '{run_dir}/ck.pt' -- python train.py --ckpt {checkpoint} --end-step {end_step} --resume {resume_from?}
sh plan/baseline_a.sh; sh plan/baseline_b.sh; sh plan/candidate_split.sh; sh plan/candidate_resume.sh
trainparity judge plan --report resume.html
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "judge",
        output_parent,
        summary="Judge a resume check whose phases ran elsewhere (resume --plan-only DIR): "
        "the same verdict and report as a check that ran them.",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument("directory", type=Path, help="the directory resume --plan-only wrote")
    parser.add_argument(
        "--run-missing",
        action="store_true",
        help="run here, as the check would, every phase whose script has not written its "
        "phase-result.json yet (warm where TRAINPARITY_START=warm); the others are read",
    )
    parser.add_argument("--no-progress", action="store_true", help="no per-phase progress lines")


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.cases.command_case import COMMAND_CASE_PREFIX, CommandCase
    from trainparity._internal.comparison.policies import ToleranceComparison
    from trainparity._internal.executors.replay import PlanReplay
    from trainparity._internal.resume.check import check_resume
    from trainparity._internal.resume.plan import PLAN_FILE
    from trainparity._internal.why.environment_leads import environment_leads

    directory = arguments.directory.resolve()
    plan = _read_plan(directory / PLAN_FILE)
    spec = plan["case_spec"]
    case = CommandCase.from_spec(spec) if spec.startswith(COMMAND_CASE_PREFIX) else spec
    arguments.cwd = Path(plan["cwd"])
    tolerance = plan.get("comparison")
    result = check_resume(
        case,
        comparison=ToleranceComparison(**tolerance) if tolerance else None,
        cwd=common.command_directory(arguments),
        work_dir=directory,
        environment=plan.get("environment") or None,
        progress=common.progress_from(arguments),
        executor=PlanReplay(directory, run_missing=arguments.run_missing),
        # Unless phases run here, the observer is the one child, and a warm server started for
        # one child costs more than the fresh interpreter (more still with preloads named).
        start=None if arguments.run_missing else "fresh",
        split_steps=plan.get("split_steps"),
        world_sizes=plan.get("world_sizes"),
        layouts=plan.get("layouts"),
    )
    leads = environment_leads(
        _fingerprint(directory, "baseline_a"), _fingerprint(directory, "candidate_resume")
    )
    return common.result_output(
        dataclasses.replace(result, environment_leads=leads), report_written=False
    )


def _fingerprint(directory: Path, phase: str) -> dict[str, Any] | None:
    """The environment of the machine that ran `phase`, as its script recorded it (None: not)."""
    from trainparity._internal.resume.plan import PHASE_ENVIRONMENT_FILE

    try:
        recorded = json.loads(
            (directory / phase / PHASE_ENVIRONMENT_FILE).read_text(encoding="utf-8")
        )
        return dict(recorded["environment"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_plan(path: Path) -> dict[str, Any]:
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise common.UsageError(
            f"no {path}: give the directory that `trainparity resume --plan-only DIR` wrote"
        ) from None
    except (OSError, ValueError) as error:
        raise common.UsageError(f"cannot read the plan {path}: {error}") from None
    if not isinstance(plan, dict) or plan.get("check") != "resume" or "case_spec" not in plan:
        raise common.UsageError(f"{path} is not a plan written by trainparity resume --plan-only")
    return plan
