"""What every `trainparity` command shares: options, argument types, output and exit codes.

Exit codes: 0 PASS, 1 FAIL, 2 ABSTAIN, 3 ERROR, 4 usage error. Output is
human-readable text on stdout (progress lines on stderr when it is a
terminal), with control characters of recorded data escaped (terminal_text);
`--json` prints exactly the machine report instead; `--report PATH`
also writes it to a file, as JSON or, for a path ending in .html, as a
self-contained HTML page.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainparity._internal.comparison.policies import ComparisonPolicy, ToleranceComparison
from trainparity._internal.outcomes import Outcome
from trainparity._internal.reports.terminal_text import printable
from trainparity._internal.state.input_files import special_file_kind

__all__ = ["EXIT_CODES", "USAGE_ERROR", "CommandOutput", "UsageError"]

EXIT_CODES = {Outcome.PASS: 0, Outcome.FAIL: 1, Outcome.ABSTAIN: 2, Outcome.ERROR: 3}
USAGE_ERROR = 4
_HTML_SUFFIXES = (".html", ".htm")


class UsageError(Exception):
    """An argument that parsed but makes no sense (exit code 4)."""


@dataclass(frozen=True)
class CommandOutput:
    """What a command produced: its machine report, the verdict (None: just information)."""

    report: dict[str, Any]
    outcome: Outcome | None
    report_written: bool = False
    text: str | None = None  # what to print instead of the report's text form (a plan)


def output_options() -> argparse.ArgumentParser:
    """--json and --report, shared by every command."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("output")
    group.add_argument(
        "--json", action="store_true", help="print exactly the machine report (JSON) on stdout"
    )
    group.add_argument(
        "--report",
        type=Path,
        metavar="PATH",
        help="also write the report to PATH: JSON, or a self-contained HTML page for *.html",
    )
    return common


def add_command(
    commands: Any,
    name: str,
    output_parent: argparse.ArgumentParser,
    *,
    summary: str,
    example: str,
    run: Callable[[argparse.Namespace], CommandOutput],
) -> argparse.ArgumentParser:
    """A sub-command parser whose --help ends with a runnable example."""
    parser = commands.add_parser(
        name,
        parents=[output_parent],
        help=summary,
        description=summary,
        epilog="example:\n" + "\n".join(f"  $ {line}" for line in example.strip().splitlines()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(run=run)
    return parser


def emit(output: CommandOutput, arguments: argparse.Namespace) -> None:
    """Print the report (text or JSON) and write the --report file unless the check wrote it."""
    from trainparity._internal.reports.html import write_html_report
    from trainparity._internal.reports.machine import report_text, write_report
    from trainparity._internal.reports.text_views import text_report

    path = arguments.report
    if path is not None and not output.report_written:
        if path.suffix.lower() in _HTML_SUFFIXES:
            write_html_report(path, output.report)
        else:
            write_report(path, output.report)
    if arguments.json:
        sys.stdout.write(report_text(output.report))
        return
    if output.text is not None:
        sys.stdout.write("".join(printable(line) + "\n" for line in output.text.splitlines()))
    else:
        sys.stdout.write(text_report(output.report, include_environment=output.outcome is None))
    if path is not None:
        print(printable(f"report written to {path}"), file=sys.stderr)


def writes_json_report(arguments: argparse.Namespace) -> Path | None:
    """The --report path when it is a JSON report the check itself can write, else None."""
    path = arguments.report
    if path is None or path.suffix.lower() in _HTML_SUFFIXES:
        return None
    return path


# Options several commands share -------------------------------------------------------


def add_tolerance_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("comparison (exact unless --rtol and --atol are given)")
    group.add_argument("--rtol", type=float, help="relative tolerance: |a-b| <= atol + rtol*|b|")
    group.add_argument("--atol", type=float, help="absolute tolerance")
    group.add_argument("--equal-nan", action="store_true", help="under a tolerance, NaN equals NaN")


def add_noise_options(parser: argparse.ArgumentParser, *, baselines: bool = True) -> None:
    """--noise-factor and its companions: judge against measured run-to-run noise."""
    group = parser.add_argument_group(
        "noise envelope (NoiseComparison: for training that is not bitwise deterministic)"
    )
    group.add_argument(
        "--noise-factor",
        type=float,
        metavar="K",
        help="the candidate may differ from uninterrupted training by K times what repeating "
        "it produces (default 8 where --baselines, --max-noise or --noise asks for the envelope; "
        "docs/resume.md, 'Training that is not bitwise deterministic')",
    )
    if baselines:
        group.add_argument(
            "--baselines",
            type=int,
            metavar="N",
            help="uninterrupted runs that measure the noise (default 3, at least 2)",
        )
    group.add_argument(
        "--max-noise",
        type=float,
        metavar="X",
        help="abstain where the noise (relative L2) exceeds X: smaller faults cannot be seen",
    )


def comparison_from(arguments: argparse.Namespace) -> ComparisonPolicy | None:
    """ToleranceComparison from --rtol/--atol/--equal-nan, NoiseComparison from --noise-factor, or None (exact)."""
    noise = noise_comparison_from(arguments)
    if noise is not None:
        if arguments.rtol is not None or arguments.atol is not None:
            raise UsageError(
                "--noise-factor and --rtol/--atol are two comparisons: give one of them"
            )
        return noise  # type: ignore[return-value]
    if arguments.rtol is None and arguments.atol is None:
        if arguments.equal_nan:
            raise UsageError("--equal-nan needs a tolerance: give --rtol and --atol too")
        return None
    if arguments.rtol is None or arguments.atol is None:
        raise UsageError("give --rtol and --atol together (or neither, for an exact comparison)")
    try:
        return ToleranceComparison(
            rtol=arguments.rtol, atol=arguments.atol, equal_nan=arguments.equal_nan
        )
    except ValueError as error:
        raise UsageError(
            f"{error} (got --rtol {arguments.rtol}, --atol {arguments.atol})"
        ) from None


def noise_comparison_from(arguments: argparse.Namespace) -> Any:
    """NoiseComparison from --noise-factor/--baselines/--max-noise/--noise; None without any.

    Any of them selects the envelope; without --noise-factor its factor is
    NoiseComparison()'s default (8).
    """
    factor = getattr(arguments, "noise_factor", None)
    baselines = getattr(arguments, "baselines", None)
    max_noise = getattr(arguments, "max_noise", None)
    from trainparity._internal.comparison.noise_policy import NoiseComparison

    if factor is None:
        # --noise, --baselines or --max-noise ask for the envelope: NoiseComparison()'s factor.
        asked = (baselines, max_noise, getattr(arguments, "noise", None))
        if all(value is None for value in asked):
            return None
        factor = NoiseComparison().factor

    if not factor > 0 or factor == float("inf"):
        raise UsageError(f"--noise-factor must be a finite number > 0, got {factor}")
    if baselines is not None and baselines < 2:
        raise UsageError(
            f"--baselines must be at least 2 (the noise is the spread of several "
            f"uninterrupted runs), got {baselines}"
        )
    if max_noise is not None and (not max_noise > 0 or max_noise == float("inf")):
        raise UsageError(f"--max-noise must be a finite number > 0, got {max_noise}")
    try:
        return NoiseComparison(
            factor=factor,
            **({"baselines": baselines} if baselines is not None else {}),
            max_noise=max_noise,
        )
    except ValueError as error:
        option = "--baselines" if "baselines" in str(error) else "--noise-factor"
        raise UsageError(f"{option}: {error}") from None


def add_run_options(parser: argparse.ArgumentParser, *, kept: str) -> None:
    """Options of the commands that launch training children; `kept`: what --work-dir keeps."""
    group = parser.add_argument_group("execution")
    group.add_argument(
        "--cwd",
        type=Path,
        help="directory the children run in; the case is imported from it (default: .)",
    )
    group.add_argument(
        "--timeout",
        type=positive_number,
        default=300.0,
        help="seconds each child may run (default: 300)",
    )
    group.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable for the children (repeatable)",
    )
    group.add_argument(
        "--work-dir",
        type=Path,
        help=f"keep {kept} here (default: a temporary directory, removed afterwards)",
    )
    group.add_argument(
        "--sequential",
        action="store_true",
        help="run one child at a time (default: children run concurrently on CPU)",
    )
    group.add_argument(
        "--start",
        choices=("fresh", "warm"),
        help="fresh: a new interpreter per child; warm: fork `python script.py`/`-m` children "
        "from a server that imported torch once (default: $TRAINPARITY_START, else fresh)",
    )
    group.add_argument(
        "--no-progress",
        action="store_true",
        help="no per-phase progress lines (shown on stderr when it is a terminal)",
    )


def add_reuse_baselines_option(parser: argparse.ArgumentParser, *, baselines: str) -> None:
    """--reuse-baselines [DIR] of `resume` and `runs`; `baselines`: which phases it keeps."""
    parser.add_argument(
        "--reuse-baselines",
        nargs="?",
        type=Path,
        const=True,
        default=False,
        metavar="DIR",
        help=f"keep {baselines} between checks and restore them, verified, while nothing "
        "they depend on changed (default DIR: $XDG_CACHE_HOME/trainparity/baselines); the "
        "report's baselines_reused says which ran",
    )


# Command templates (`trainparity resume ... -- python train.py ...`) ----------------------

TEMPLATE_COMMANDS = ("resume", "runs", "crashes")


def split_template(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(the options, the command template after the first `--`) of a resume or runs command line.

    argparse would hand the template's first word to the optional CASE
    positional, so the template is cut off before parsing.
    """
    if argv and argv[0] in TEMPLATE_COMMANDS and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1 :]
    return argv, None


def add_case_options(parser: argparse.ArgumentParser, *, resume: bool) -> None:
    """CASE, or the options of a case made from the command after `--`."""
    parser.add_argument(
        "case",
        nargs="?",
        help="importable case class, 'package.module:ClassName' (or a command after --)",
    )
    group = parser.add_argument_group(
        "command template (instead of CASE; python is this check's interpreter): "
        "-- python train.py --ckpt {checkpoint} "
        "--end-step {end_step}" + (" [--resume {resume_from?}]" if resume else "")
    )
    if resume:
        group.add_argument(
            "--split-step", type=positive_int, help="where the interrupted run stops"
        )
    group.add_argument("--total-step", type=positive_int, help="where every run ends")
    group.add_argument(
        "--checkpoint",
        metavar="TEMPLATE",
        help="where a phase's checkpoint is, inside its run directory: '{run_dir}/ck.pt'"
        + (
            "; without {resume_from?}, where the resumed job finds the staged checkpoint by itself"
            if resume
            else ""
        ),
    )
    group.add_argument(
        "--observe",
        metavar="MODULE:FUNCTION",
        help="called with the checkpoint path, returns the state to compare (default: the "
        "torch.load'd dict, weights only, or a DCP or ZeRO checkpoint directory through "
        "load_checkpoint_directory)",
    )
    group.add_argument(
        "--cd-run-dir",
        action="store_true",
        help="run each phase in its own run directory, for scripts that save into their working "
        "directory; the program and the Python script (train.py) are still found from --cwd, "
        "which is also first on PYTHONPATH (CommandCase(cwd='{run_dir}'))",
    )


def add_executor_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        choices=("local", "slurm"),
        default="local",
        help="where the training phases run: here (default), or one SLURM job each, on the "
        "cluster sbatch would use (SLURM_CONF, SBATCH_PARTITION); the run directory "
        "(--work-dir) must then be on a path every node shares",
    )


def executor_from(arguments: argparse.Namespace) -> Any:
    """None (local children) or a SlurmExecutor read from the environment, as sbatch reads it."""
    if arguments.executor != "slurm":
        return None
    from trainparity._internal.executors.slurm import SlurmExecutor

    return SlurmExecutor.from_environment()


def case_from(arguments: argparse.Namespace, *, resume: bool) -> Any:
    """The check's case: CASE as given, or a CommandCase from the template after `--`."""
    from trainparity._internal.cases.command_case import CommandCase
    from trainparity._internal.cases.loading import CaseSetupError

    template = getattr(arguments, "template", None)
    steps = {"total_step": arguments.total_step}
    if resume:
        steps["split_step"] = arguments.split_step
    given = [name for name, value in steps.items() if value is not None]
    if arguments.checkpoint is not None:
        given.append("checkpoint")
    if arguments.observe is not None:
        given.append("observe")
    if arguments.cd_run_dir:
        given.append("cd_run_dir")
    if arguments.case is not None:
        if template is not None:
            raise UsageError(f"give CASE {arguments.case!r} or a command after --, not both")
        if given:
            raise UsageError(
                f"--{given[0].replace('_', '-')} belongs to a command template: "
                "give it with a command after --, or drop it"
            )
        return arguments.case
    if template is None:
        raise UsageError(
            "give a CASE ('package.module:ClassName') or a training command after --, e.g. "
            "--total-step 4 --checkpoint '{run_dir}/ck.pt' -- python train.py --ckpt {checkpoint}"
        )
    missing = [name for name in (*steps, "checkpoint") if name not in given]
    if missing:
        flags = ", ".join("--" + name.replace("_", "-") for name in missing)
        raise UsageError(f"a command template needs {flags}")
    try:
        return CommandCase(
            template=template,
            checkpoint=arguments.checkpoint,
            observe=arguments.observe,
            cwd="{run_dir}" if arguments.cd_run_dir else None,
            **steps,
        )
    except CaseSetupError as error:
        raise UsageError(str(error)) from None


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers, such as `2,4` (argparse type)."""
    items = text.split(",")
    try:
        values = tuple(int(item) for item in items)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers such as 2,4, got {text!r}"
        ) from None
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"must be positive integers, got {text!r}")
    return values


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def environment_from(arguments: argparse.Namespace) -> dict[str, str] | None:
    """--env KEY=VALUE pairs as a dict (None when none were given)."""
    pairs = {}
    for item in arguments.env:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise UsageError(f"--env expects KEY=VALUE, got {item!r}")
        pairs[key] = value
    return pairs or None


def require_regular_file(path: Path, option: str) -> None:
    """A usage error for a FIFO or device given as an input file (reading one could block)."""
    kind = special_file_kind(path)
    if kind is not None:
        raise UsageError(f"{option} {path} is {kind}, not a regular file")


def progress_from(arguments: argparse.Namespace) -> bool:
    """Per-phase progress lines on stderr, when it is a terminal and not switched off."""
    return not arguments.no_progress and sys.stderr.isatty()


def command_directory(arguments: argparse.Namespace) -> Path:
    """--cwd (default: the current directory), made importable like `python -m` does.

    The console script's sys.path starts at its own bin directory, so a case
    such as `my_project.cases:Resume` is found only once this is on it.
    """
    directory = (arguments.cwd or Path.cwd()).resolve()
    if not directory.is_dir():
        raise UsageError(f"--cwd {arguments.cwd} is not a directory")
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    return directory


def run_keywords(arguments: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of check_resume/check_accumulation that add_run_options sets."""
    return {
        "cwd": command_directory(arguments),
        "work_dir": arguments.work_dir,
        "environment": environment_from(arguments),
        "timeout": arguments.timeout,
        "parallel": False if arguments.sequential else None,
        "progress": progress_from(arguments),
        "start": arguments.start,
    }


def result_output(result: Any, *, report_written: bool) -> CommandOutput:
    """The output of a check command: its result's report and outcome.

    A check that could not start because of the user's input (a bad case path,
    case shape, step numbers) is a usage error here, not an ERROR verdict.
    """
    if getattr(result, "usage_error", None) is not None:
        raise UsageError(result.message)
    return CommandOutput(result.to_dict(), Outcome(result.outcome), report_written)
