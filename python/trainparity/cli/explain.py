"""`trainparity explain REPORT.json`: why the two runs of a check part, by rerunning them (docs/forensics.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainparity.cli import common

EXAMPLE = """\
trainparity runs tests.fixtures.noisy_training:ThreadRuns --report runs.json
trainparity explain runs.json
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "explain",
        output_parent,
        summary="Rerun the two runs of a check that part (its JSON report) up to the first "
        "divergent step: the first op where they part, and each environment lead tested by a "
        "rerun (confirmed, partial, ruled out, not testable here).",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument("report", type=Path, help="the JSON report of a check_resume or check_runs")
    parser.add_argument(
        "--case",
        help="the case spec package.module:ClassName (default: the report's case)",
    )
    parser.add_argument(
        "--max-reruns",
        type=common.non_negative_int,
        default=8,
        help="at most this many reruns to test leads (default 8)",
    )
    parser.add_argument("--cwd", type=Path, help="where the case is imported and the runs run")
    parser.add_argument("--timeout", type=common.positive_number, default=300.0)


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity.why.explain import explain

    common.require_regular_file(arguments.report, "report")
    try:
        report = json.loads(arguments.report.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise common.UsageError(
            f"{arguments.report} is not a readable JSON report: {error}"
        ) from None
    if not isinstance(report, dict) or "outcome" not in report:
        raise common.UsageError(f"{arguments.report} is not a trainparity report")
    cwd = common.command_directory(arguments)  # the case imports from there, as `resume` does
    try:
        result = explain(
            report,
            case=arguments.case,
            cwd=cwd,
            timeout=arguments.timeout,
            max_reruns=arguments.max_reruns,
        )
    except ValueError as error:
        raise common.UsageError(str(error)) from None
    return common.result_output(result, report_written=False)
