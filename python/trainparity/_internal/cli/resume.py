"""`trainparity resume CASE`: resume parity of a case through real processes."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """\
trainparity resume trainparity.quickstarts.resume:FaultyCase --report resume.html
trainparity resume --split-step 2 --total-step 4 --checkpoint '{run_dir}/ck.pt' -- python train.py --ckpt {checkpoint} --end-step {end_step} --resume {resume_from?}
trainparity resume --split-step 2 --total-step 4 --checkpoint '{run_dir}/ckpts' --observe train:newest -- python train.py --out-dir {checkpoint} --stop-after {end_step}
trainparity resume my_project.cases:Resume --split-steps 2,4 --world-sizes 2,1,3 --rtol 1e-4 --atol 1e-6
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
    chain = parser.add_argument_group("chained and elastic resumes")
    chain.add_argument(
        "--split-steps",
        type=common.int_list,
        metavar="S1,S2,...",
        help="a chain of resumes: the candidate stops and resumes in a fresh process at each "
        "step (increasing, each below the total step); check_resume(split_steps=...)",
    )
    chain.add_argument(
        "--world-sizes",
        type=common.int_list,
        metavar="W1,W2,...",
        help="each candidate phase's rank count (one more than the split steps), for a CASE "
        "whose command() reads plan.world_size; check_resume(world_sizes=...)",
    )
    chain.add_argument(
        "--layouts",
        type=_layout_names,
        metavar="L1,L2,...",
        help="each candidate phase's layout name, such as dp4,dp2xtp2 (one more than the split "
        "steps), for a CASE whose command() reads plan.layout; check_resume(layouts=...)",
    )
    common.add_tolerance_options(parser)
    parser.add_argument(
        "--explain",
        action="store_true",
        help="on a FAIL or ABSTAIN at a recorded step, rerun the two runs that part to say why "
        "(the first op, each environment lead tested; docs/forensics.md)",
    )
    common.add_noise_options(parser)
    common.add_executor_option(parser)
    common.add_reuse_baselines_option(parser, baselines="the uninterrupted baselines")
    parser.add_argument(
        "--plan-only",
        type=Path,
        metavar="DIR",
        help="run nothing: write each phase's command, environment and expected outputs to "
        "DIR/plan.json and DIR/<phase>.sh, to run with any scheduler; then `trainparity judge DIR`",
    )
    common.add_run_options(parser, kept="every phase's logs and checkpoints")


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.resume.check import check_resume

    comparison = common.comparison_from(arguments)
    chain = _chain(arguments)
    if arguments.plan_only is not None:
        return _plan(arguments, comparison, chain)
    report_path = common.writes_json_report(arguments)
    result = check_resume(
        common.case_from(arguments, resume=True),
        comparison=comparison,
        report_path=report_path,
        executor=common.executor_from(arguments),
        explain=arguments.explain,
        reuse_baselines=arguments.reuse_baselines,
        **chain,
        **common.run_keywords(arguments),
    )
    return common.result_output(result, report_written=report_path is not None)


def _chain(arguments: argparse.Namespace) -> dict[str, Any]:
    """check_resume's split_steps/world_sizes/layouts from their options, checked.

    What needs the case (how many rank counts its chain takes, the steps
    against its total step) is checked with the case, as check_resume does.
    """
    steps, sizes = arguments.split_steps, arguments.world_sizes
    if steps is not None and list(steps) != sorted(set(steps)):
        raise common.UsageError(
            f"--split-steps must be strictly increasing, got {','.join(map(str, steps))}"
        )
    if steps is not None and sizes is not None and len(sizes) != len(steps) + 1:
        raise common.UsageError(
            f"--world-sizes needs one rank count per candidate phase: {len(steps) + 1} for "
            f"{len(steps)} split steps, got {len(sizes)} ({','.join(map(str, sizes))})"
        )
    layouts = arguments.layouts
    if steps is not None and layouts is not None and len(layouts) != len(steps) + 1:
        raise common.UsageError(
            f"--layouts needs one layout name per candidate phase: {len(steps) + 1} for "
            f"{len(steps)} split steps, got {len(layouts)} ({','.join(layouts)})"
        )
    if getattr(arguments, "template", None) is not None:
        if sizes is not None:
            raise common.UsageError(
                "--world-sizes needs a CASE whose command() reads plan.world_size: a command "
                "template has no field for the rank count"
            )
        if layouts is not None:
            raise common.UsageError(
                "--layouts needs a CASE whose command() reads plan.layout: a command "
                "template has no field for the layout"
            )
        if steps is not None and arguments.split_step is None:
            arguments.split_step = steps[0]  # a template's case needs its first split
    return {"split_steps": steps, "world_sizes": sizes, "layouts": layouts}


def _layout_names(text: str) -> tuple[str, ...]:
    """Comma-separated layout names, such as `dp4,dp2xtp2` (argparse type)."""
    names = tuple(text.split(","))
    if not all(names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated layout names such as dp4,dp2xtp2, got {text!r}"
        )
    return names


def _plan(
    arguments: argparse.Namespace, comparison: Any, chain: dict[str, Any]
) -> common.CommandOutput:
    from trainparity._internal.cases.loading import CaseSetupError
    from trainparity._internal.resume.plan import write_plan

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
            **chain,
        )
    except CaseSetupError as error:
        raise common.UsageError(str(error)) from None
    directory = arguments.plan_only.resolve()
    lines = [f"plan written to {directory}: run each script, then `trainparity judge {directory}`"]
    for phase in plan["phases"]:
        after = f" (after {', '.join(phase['after'])})" if phase["after"] else ""
        lines.append(f"  {phase['script']}{after}: {phase['name']} to step {phase['end_step']}")
    return common.CommandOutput(plan, outcome=None, text="\n".join(lines))
