"""`trainparity resume CASE`: resume parity of a case through real processes."""

from __future__ import annotations

import argparse
from typing import Any

from trainparity import cli

EXAMPLE = "trainparity resume trainparity.quickstarts.resume:FaultyCase --report resume.html"


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    parser = cli.add_command(
        commands,
        "resume",
        common,
        summary="Check that save -> exit -> fresh-process load -> continue reproduces uninterrupted training.",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument("case", help="importable case class, 'package.module:ClassName'")
    cli.add_tolerance_options(parser)
    cli.add_run_options(parser, kept="every phase's logs and checkpoints")


def run(arguments: argparse.Namespace) -> cli.CommandOutput:
    from trainparity.process_resume import check_resume

    comparison = cli.comparison_from(arguments)
    report_path = cli.writes_json_report(arguments)
    result = check_resume(
        arguments.case,
        comparison=comparison,
        report_path=report_path,
        **cli.run_keywords(arguments),
    )
    return cli.result_output(result, report_written=report_path is not None)
