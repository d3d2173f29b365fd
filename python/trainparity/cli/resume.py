"""`trainparity resume CASE`: resume parity of a case through real processes."""

from __future__ import annotations

import argparse
from typing import Any

from trainparity.cli import common

EXAMPLE = "trainparity resume trainparity.quickstarts.resume:FaultyCase --report resume.html"


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
    common.add_run_options(parser, kept="every phase's logs and checkpoints")


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity.resume.check import check_resume

    comparison = common.comparison_from(arguments)
    report_path = common.writes_json_report(arguments)
    result = check_resume(
        common.case_from(arguments, resume=True),
        comparison=comparison,
        report_path=report_path,
        executor=common.executor_from(arguments),
        **common.run_keywords(arguments),
    )
    return common.result_output(result, report_written=report_path is not None)
