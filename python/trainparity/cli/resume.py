"""`trainparity resume CASE`: resume parity of a case through real processes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainparity.cli import common

EXAMPLE = """\
trainparity resume trainparity.quickstarts.resume:FaultyCase --report resume.html
trainparity resume --split-step 2 --total-step 4 --checkpoint '{run_dir}/ck.pt' -- python train.py --ckpt {checkpoint} --end-step {end_step} --resume {resume_from?}
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "resume",
        output_parent,
        summary="Check that save -> exit -> fresh-process load -> continue reproduces uninterrupted training.",
        example=EXAMPLE,
        run=run,
    )
    common.add_case_options(parser, resume=True)
    common.add_tolerance_options(parser)
    common.add_executor_option(parser)
    parser.add_argument(
        "--plan-only",
        type=Path,
        metavar="DIR",
        help="run nothing: write each phase's command, environment and expected outputs to "
        "DIR/plan.json and DIR/<phase>.sh, to run with any scheduler; then `trainparity judge DIR`",
    )
    common.add_run_options(parser, kept="every phase's logs and checkpoints")


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity.resume.check import check_resume

    comparison = common.comparison_from(arguments)
    if arguments.plan_only is not None:
        return _plan(arguments, comparison)
    report_path = common.writes_json_report(arguments)
    result = check_resume(
        common.case_from(arguments, resume=True),
        comparison=comparison,
        report_path=report_path,
        executor=common.executor_from(arguments),
        **common.run_keywords(arguments),
    )
    return common.result_output(result, report_written=report_path is not None)


def _plan(arguments: argparse.Namespace, comparison: Any) -> common.CommandOutput:
    from trainparity.importing import CaseSetupError
    from trainparity.resume.plan import write_plan

    if arguments.executor != "local" or arguments.work_dir is not None:
        raise common.UsageError("--plan-only runs nothing: drop --executor and --work-dir")
    keywords = common.run_keywords(arguments)
    try:
        plan = write_plan(
            common.case_from(arguments, resume=True),
            arguments.plan_only,
            cwd=keywords["cwd"],
            environment=keywords["environment"],
            comparison=comparison,
        )
    except CaseSetupError as error:
        raise common.UsageError(str(error)) from None
    directory = arguments.plan_only.resolve()
    lines = [f"plan written to {directory}: run each script, then `trainparity judge {directory}`"]
    for phase in plan["phases"]:
        after = f" (after {', '.join(phase['after'])})" if phase["after"] else ""
        lines.append(f"  {phase['script']}{after}: {phase['name']} to step {phase['end_step']}")
    return common.CommandOutput(plan, outcome=None, text="\n".join(lines))
