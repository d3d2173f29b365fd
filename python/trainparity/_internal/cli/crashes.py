"""`trainparity crashes -- COMMAND`: kill the job at every step and inside every save, restart it."""

from __future__ import annotations

import argparse
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """\
trainparity crashes --total-step 8 --checkpoint '{run_dir}/ckpts' -- python train.py --ckpt-dir {checkpoint} --steps {end_step}
trainparity crashes --points saves --power-loss --max-points 40 --total-step 8 --checkpoint '{run_dir}/out' -- python train_hf.py --output-dir {checkpoint}
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "crashes",
        output_parent,
        summary="Kill the job at every step and inside every save, restart it with the same "
        "command, and check it ends as if it had never stopped.",
        example=EXAMPLE,
        run=run,
    )
    group = parser.add_argument_group(
        "the job: a command after -- that resumes by itself from its checkpoint location "
        "(no {resume_from?}) and calls trainparity.record(step, state)"
    )
    group.add_argument("--total-step", type=common.positive_int, help="where the job ends")
    group.add_argument(
        "--checkpoint",
        metavar="TEMPLATE",
        help="the job's checkpoint location inside its run directory: '{run_dir}/ckpts'",
    )
    group.add_argument(
        "--cd-run-dir",
        action="store_true",
        help="run the job in its run directory (CommandCase(cwd='{run_dir}'))",
    )
    points = parser.add_argument_group("crash points")
    points.add_argument(
        "--points",
        type=_kinds,
        default=("steps", "saves"),
        metavar="steps,saves",
        help="after each record() (steps) and before each file-system call of a save (saves); "
        "default both",
    )
    points.add_argument(
        "--power-loss",
        action="store_true",
        help="also restart each save point from what a power loss leaves: data not fsynced "
        "is lost, and names not made durable by a directory fsync (docs/crashes.md)",
    )
    points.add_argument(
        "--max-points",
        type=common.positive_int,
        metavar="N",
        help="spread N points over the job (each save's first and last write, renames and "
        "fsyncs always kept)",
    )
    points.add_argument(
        "--max-lost-steps",
        type=common.non_negative_int,
        metavar="K",
        help="FAIL a restart that redoes more than K steps (default: progress lost is reported)",
    )
    common.add_tolerance_options(parser)
    common.add_noise_options(parser)
    common.add_run_options(parser, kept="every run's directory, logs and records")


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.cases.command_case import CommandCase
    from trainparity._internal.cases.loading import CaseSetupError
    from trainparity._internal.crashes.check import check_crashes

    template = getattr(arguments, "template", None)
    if template is None:
        raise common.UsageError(
            "give the job's command after --, e.g. --total-step 8 --checkpoint '{run_dir}/ckpts' "
            "-- python train.py --ckpt-dir {checkpoint}"
        )
    missing = [
        flag
        for flag, value in (
            ("--total-step", arguments.total_step),
            ("--checkpoint", arguments.checkpoint),
        )
        if value is None
    ]
    if missing:
        raise common.UsageError(f"a crash check needs {', '.join(missing)}")
    try:
        case = CommandCase(
            template=template,
            checkpoint=arguments.checkpoint,
            total_step=arguments.total_step,
            cwd="{run_dir}" if arguments.cd_run_dir else None,
        )
    except CaseSetupError as error:
        raise common.UsageError(str(error)) from None
    keywords = common.run_keywords(arguments)
    report_path = common.writes_json_report(arguments)
    result = check_crashes(
        case,
        points=arguments.points,
        power_loss=arguments.power_loss,
        max_points=arguments.max_points,
        max_lost_steps=arguments.max_lost_steps,
        comparison=common.comparison_from(arguments),
        report_path=report_path,
        **keywords,
    )
    return common.result_output(result, report_written=report_path is not None)


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(item.strip() for item in text.split(",") if item.strip())
    if not kinds or any(kind not in ("steps", "saves") for kind in kinds):
        raise argparse.ArgumentTypeError(f"expected steps, saves or steps,saves, got {text!r}")
    return kinds
