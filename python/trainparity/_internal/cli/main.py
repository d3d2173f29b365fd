"""The `trainparity` command: the parser of every command, and dispatch to the one asked for.

The command modules register their own options and run functions; the
helpers they share live in cli/common.py, which imports none of them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from trainparity._internal.cli import accumulation as cli_accumulation
from trainparity._internal.cli import coverage as cli_coverage
from trainparity._internal.cli import crashes as cli_crashes
from trainparity._internal.cli import diff as cli_diff
from trainparity._internal.cli import env as cli_env
from trainparity._internal.cli import explain as cli_explain
from trainparity._internal.cli import judge as cli_judge
from trainparity._internal.cli import resume as cli_resume
from trainparity._internal.cli import runs as cli_runs
from trainparity._internal.cli import snapshot as cli_snapshot
from trainparity._internal.cli import trace as cli_trace
from trainparity._internal.cli.common import (
    EXIT_CODES,
    USAGE_ERROR,
    UsageError,
    emit,
    output_options,
    split_template,
)
from trainparity._internal.error_text import error_text
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.terminal_text import printable

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors exit with 4 (argparse's 2 is ABSTAIN here).

    argparse quotes some bad arguments raw ("unrecognized arguments: ..."), so
    the message is made printable like every other line for the terminal.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {printable(message)}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one `trainparity` command; returns its exit code."""
    parser = build_parser()
    options, template = split_template(list(sys.argv[1:] if argv is None else argv))
    try:
        arguments = parser.parse_args(options)
    except SystemExit as stop:  # --help (0) or a usage error (4)
        return stop.code if isinstance(stop.code, int) else USAGE_ERROR
    arguments.template = template
    if arguments.command is None:
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    prefix = f"trainparity {arguments.command}: error:"
    try:
        output = arguments.run(arguments)
        emit(output, arguments)
    except UsageError as error:
        print(printable(f"{prefix} {error}"), file=sys.stderr)
        return USAGE_ERROR
    except KeyboardInterrupt:
        # The checks have already stopped their children and removed temporary files.
        print(f"trainparity {arguments.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # e.g. an unwritable --report path: ERROR, not a traceback
        print(printable(f"{prefix} {error_text(error)}"), file=sys.stderr)
        return EXIT_CODES[Outcome.ERROR]
    return EXIT_CODES[output.outcome] if output.outcome is not None else 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="trainparity",
        description="Differential tests for PyTorch training semantics.",
        epilog="Exit codes: 0 PASS, 1 FAIL, 2 ABSTAIN, 3 ERROR, 4 usage error. "
        "Run `trainparity COMMAND --help` for a command's options and an example.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    output_parent = output_options()
    for module in (
        cli_resume,
        cli_runs,
        cli_crashes,
        cli_judge,
        cli_accumulation,
        cli_coverage,
        cli_snapshot,
        cli_trace,
        cli_diff,
        cli_explain,
        cli_env,
    ):
        module.register(commands, output_parent)
    return parser


def run_as_program() -> None:
    """`python -m trainparity`: run the command line and exit with its code."""
    sys.exit(main())
