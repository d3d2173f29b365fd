"""`trainparity runs CASE`: do two or more configurations of one run end in the same state?"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """trainparity runs hf_cases:TrainerAccumulation --rtol 1e-4 --atol 1e-5
trainparity runs cases:Training --variant 'accum4x2=--accum 4 --batch 2' --variant 'accum1x8=--accum 1 --batch 8'"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "runs",
        output_parent,
        summary="Check that every variant of a run (arguments, environment) ends in the same state.",
        example=EXAMPLE,
        run=run,
    )
    common.add_case_options(parser, resume=False)
    group = parser.add_argument_group(
        "variants (default: the case's `variants`; the first is the reference)"
    )
    group.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=ARGS",
        help="a variant and the arguments added to the case's command, shell-quoted (repeatable)",
    )
    group.add_argument(
        "--variant-env",
        action="append",
        default=[],
        metavar="NAME:KEY=VALUE",
        help="an environment variable for one variant's runs (repeatable)",
    )
    common.add_tolerance_options(parser)
    parser.add_argument(
        "--explain",
        action="store_true",
        help="on a FAIL or ABSTAIN at a recorded step, rerun the two runs that part to say why "
        "(the first op, each environment lead tested; docs/forensics.md)",
    )
    common.add_noise_options(parser, baselines=False)
    parser.add_argument(
        "--noise",
        nargs=2,
        metavar=("VARIANT_A", "VARIANT_B"),
        help="the two variants whose difference is accepted as noise (two repeats of one "
        "variant, or 1 vs 2 threads; factor 8 unless --noise-factor says otherwise); "
        "default with --noise-factor: the reference's two runs",
    )
    common.add_executor_option(parser)
    common.add_reuse_baselines_option(parser, baselines="the reference variant's two runs")
    common.add_run_options(parser, kept="every run's logs, checkpoints and snapshot files")


def variants_from(arguments: argparse.Namespace) -> dict[str, dict[str, Any]] | None:
    """--variant and --variant-env as check_runs' `variants` (None: the case's own)."""
    variants: dict[str, dict[str, Any]] = {}
    for item in arguments.variant:
        name, separator, args = item.partition("=")
        if not separator or not name:
            raise common.UsageError(f"--variant expects NAME=ARGS, got {item!r}")
        if name in variants:
            raise common.UsageError(f"--variant {name} is given twice")
        try:
            variants[name] = {"args": shlex.split(args), "env": {}}
        except ValueError as error:
            raise common.UsageError(f"--variant {name}: {error}") from None
    for item in arguments.variant_env:
        name, separator, assignment = item.partition(":")
        key, equals, value = assignment.partition("=")
        if not separator or not equals or not name or not key:
            raise common.UsageError(f"--variant-env expects NAME:KEY=VALUE, got {item!r}")
        if name not in variants:
            raise common.UsageError(f"--variant-env names {name!r}, which no --variant declares")
        variants[name]["env"][key] = value
    return variants or None


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.runs.check import check_runs

    comparison = common.comparison_from(arguments)
    variants = variants_from(arguments)
    report_path = common.writes_json_report(arguments)
    result = check_runs(
        common.case_from(arguments, resume=False),
        variants,
        comparison=comparison,
        **({"noise": tuple(arguments.noise)} if arguments.noise is not None else {}),
        report_path=report_path,
        executor=common.executor_from(arguments),
        explain=arguments.explain,
        reuse_baselines=arguments.reuse_baselines,
        **common.run_keywords(arguments),
    )
    return common.result_output(result, report_written=report_path is not None)
