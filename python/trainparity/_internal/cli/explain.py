"""`trainparity explain REPORT.json`: why the two runs of a check part, by rerunning them (docs/forensics.md)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """\
trainparity runs tests.fixtures.noisy_training:ThreadRuns --report runs.json
trainparity explain runs.json
trainparity explain run_a/ run_b/ --rerun-a 'python train.py --steps 10'
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "explain",
        output_parent,
        summary="Rerun the two runs of a check that part (its JSON report) up to the first "
        "divergent step: the first op where they part, and each environment lead tested by a "
        "rerun (confirmed, partial, ruled out, not controllable from outside, no effect seen, "
        "not testable here).",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument(
        "sources",
        type=Path,
        nargs="+",
        metavar="REPORT | RUN_A RUN_B",
        help="the JSON report of a check_resume or check_runs, or two recording directories "
        "(with --rerun-a)",
    )
    parser.add_argument(
        "--rerun-a",
        metavar="COMMAND",
        help="for two recordings: side A's command, rerun here under each of B's settable knobs",
    )
    parser.add_argument(
        "--case",
        help="the case spec package.module:ClassName (default: the report's case, or its "
        "command template's command_case)",
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
    from trainparity._internal.why.explain import explain

    if len(arguments.sources) == 2:
        return _two_recordings(arguments)
    if len(arguments.sources) != 1:
        raise common.UsageError("give one JSON report, or two recording directories")
    if arguments.rerun_a is not None:
        raise common.UsageError("--rerun-a is for two recordings: give RUN_A RUN_B")
    (report_path,) = arguments.sources
    common.require_regular_file(report_path, "report")
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise common.UsageError(f"{report_path} is not a readable JSON report: {error}") from None
    if not isinstance(report, dict) or "outcome" not in report:
        raise common.UsageError(f"{report_path} is not a trainparity report")
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


def _two_recordings(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.why.recordings import explain_recordings

    run_a, run_b = arguments.sources
    for path in (run_a, run_b):
        if not path.is_dir():
            raise common.UsageError(f"{path} is not a recording directory")
    if not arguments.rerun_a:
        raise common.UsageError(
            "two recordings need --rerun-a COMMAND: side A's command, to rerun here"
        )
    cwd = common.command_directory(arguments)
    try:
        result = explain_recordings(
            run_a,
            run_b,
            arguments.rerun_a,
            cwd=cwd,
            timeout=arguments.timeout,
            max_reruns=arguments.max_reruns,
        )
    except ValueError as error:
        raise common.UsageError(str(error)) from None
    return common.result_output(result, report_written=False)
