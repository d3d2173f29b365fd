"""`trainparity env`: print this machine's environment fingerprint."""

from __future__ import annotations

import argparse
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = "trainparity env --json"


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    common.add_command(
        commands,
        "env",
        output_parent,
        summary="Print the environment fingerprint recorded in every snapshot and report.",
        example=EXAMPLE,
        run=run,
    )


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.environment import environment_fingerprint
    from trainparity._internal.version import add_report_metadata

    report = add_report_metadata({"environment": environment_fingerprint(initialize_cuda=True)})
    return common.CommandOutput(report, outcome=None)
