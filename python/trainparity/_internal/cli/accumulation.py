"""`trainparity accumulation CASE --microbatches N`: accumulation parity of one optimizer update."""

from __future__ import annotations

import argparse
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = (
    "trainparity accumulation trainparity.quickstarts.accumulation:Case --microbatches 2 "
    "--rtol 1e-6 --atol 1e-7"
)
# (flag, AccumulationExecutionPlan field, value the flag sets): the plan's booleans.
_PLAN_SWITCHES = (
    ("--no-scale-accumulated-loss", "scale_accumulated_loss", False),
    ("--no-explicit-loss-accounting", "use_explicit_loss_accounting", False),
    ("--optimizer-step-per-microbatch", "optimizer_step_per_microbatch", True),
    ("--scheduler-step-per-microbatch", "scheduler_step_per_microbatch", True),
    ("--zero-grad-before-gradient-observation", "zero_grad_before_gradient_observation", True),
    ("--clip-per-microbatch", "clip_per_microbatch", True),
    ("--amp-step-before-unscale", "amp_step_before_unscale", True),
    ("--omit-final-microbatch", "omit_final_microbatch", True),
)


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "accumulation",
        output_parent,
        summary="Check that a microbatch plan gives the full-batch update at one optimizer boundary.",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument("case", help="importable case class, 'package.module:ClassName'")
    plan = parser.add_argument_group("candidate plan (AccumulationExecutionPlan)")
    plan.add_argument(
        "--microbatches",
        type=common.positive_int,
        required=True,
        metavar="N",
        help="split the full batch into N contiguous microbatches",
    )
    plan.add_argument(
        "--clip-grad-norm",
        type=common.positive_number,
        metavar="MAX_NORM",
        help="clip gradients to this norm (the baseline clips too)",
    )
    for flag, field, value in _PLAN_SWITCHES:
        plan.add_argument(
            flag,
            dest=field,
            action="store_const",
            const=value,
            default=not value,
            help=f"plan field {field}={value}",
        )
    parser.add_argument(
        "--device", default="cpu", help="device for build() and batch() (default: cpu)"
    )
    parser.add_argument(
        "--seed",
        type=_seed,
        default=23,
        help="seed of every child: 0 to 2**32-1, the range NumPy accepts too (default: 23)",
    )
    common.add_tolerance_options(parser)
    common.add_noise_options(parser)
    common.add_run_options(parser, kept="every child's logs, result and observation file")


def _seed(text: str) -> int:
    """The worker seeds random, torch and NumPy alike; NumPy takes only 0 .. 2**32-1."""
    value = common.non_negative_int(text)
    if value >= 2**32:
        raise argparse.ArgumentTypeError(f"must be below 2**32, got {text!r}")
    return value


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.accumulation.check import (
        AccumulationExecutionPlan,
        check_accumulation,
    )

    comparison = common.comparison_from(arguments)
    plan_fields = {field: getattr(arguments, field) for _, field, _ in _PLAN_SWITCHES}
    try:
        candidate = AccumulationExecutionPlan(
            arguments.microbatches, clip_grad_norm=arguments.clip_grad_norm, **plan_fields
        )
        candidate.validate()
    except ValueError as error:
        raise common.UsageError(f"invalid plan: {error}") from None
    report_path = common.writes_json_report(arguments)
    result = check_accumulation(
        arguments.case,
        candidate=candidate,
        comparison=comparison,
        device=arguments.device,
        seed=arguments.seed,
        report_path=report_path,
        **common.run_keywords(arguments),
    )
    return common.result_output(result, report_written=report_path is not None)
