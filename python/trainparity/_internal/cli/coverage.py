"""`trainparity coverage`: audit the sample IDs each rank recorded against a coverage policy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainparity._internal.cli import common

if TYPE_CHECKING:
    from trainparity._internal.coverage.audit import CoveragePolicy

EXAMPLE = """\
python -c "import numpy; numpy.save('rank0.npy', numpy.arange(0, 8, 2)); numpy.save('rank1.npy', numpy.arange(1, 8, 2))"
trainparity coverage --ids 0=rank0.npy --ids 1=rank1.npy --policy exactly_once --universe 8
"""
_POLICIES = ("exactly_once", "at_least_once", "no_cross_rank_overlap", "expected_padding")


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "coverage",
        output_parent,
        summary="Audit the sample IDs each rank consumed against a declared coverage policy.",
        example=EXAMPLE,
        run=run,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--ids",
        action="append",
        metavar="RANK=PATH",
        help="a rank's IDs in consumption order: a 1-D int64 .npy file or raw little-endian "
        "int64 (repeat per rank)",
    )
    source.add_argument(
        "--ids-dir",
        type=Path,
        metavar="DIR",
        help="a directory written by trainparity.record_ids: every recorded epoch is audited "
        "against the policy on its own (or only --epoch)",
    )
    parser.add_argument("--policy", choices=_POLICIES, required=True, help="the coverage policy")
    universe = parser.add_mutually_exclusive_group()
    universe.add_argument(
        "--universe", type=common.non_negative_int, metavar="N", help="expected IDs are 0 .. N-1"
    )
    universe.add_argument(
        "--universe-file", type=Path, metavar="PATH", help="expected IDs, one integer per line"
    )
    parser.add_argument(
        "--padding-count",
        type=common.non_negative_int,
        metavar="N",
        help="declared repetitions (needed by --policy expected_padding)",
    )
    parser.add_argument(
        "--epoch",
        type=common.non_negative_int,
        help="epoch of every ID of --ids (default: 0); with --ids-dir, the one epoch to audit",
    )
    parser.add_argument(
        "--max-examples",
        type=common.non_negative_int,
        default=10,
        metavar="N",
        help="anomalous IDs listed in the report (default: 10)",
    )
    parser.add_argument(
        "--evidence", type=Path, metavar="PATH", help="write the complete evidence JSON here"
    )


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.coverage.audit import audit_rank_arrays

    policy = _policy(arguments, _universe(arguments))
    if arguments.ids_dir is not None:
        return _audit_directory(arguments, policy)
    rank_files = _rank_files(arguments.ids)
    result = audit_rank_arrays(
        rank_files,
        policy=policy,
        epoch=arguments.epoch or 0,
        max_examples=arguments.max_examples,
        evidence_path=arguments.evidence,
    )
    return common.result_output(result, report_written=False)


def _audit_directory(arguments: argparse.Namespace, policy: CoveragePolicy) -> common.CommandOutput:
    """Each epoch on its own; the report is the first epoch not to PASS (else the last one's)."""
    from trainparity._internal.coverage.recorded_ids import audit_recorded_ids
    from trainparity._internal.outcomes import Outcome

    if not arguments.ids_dir.is_dir():
        raise common.UsageError(f"--ids-dir {arguments.ids_dir}: not a directory")
    if arguments.evidence is not None:
        raise common.UsageError("--evidence applies to --ids; --ids-dir audits several epochs")
    epochs = None if arguments.epoch is None else [arguments.epoch]
    results = audit_recorded_ids(
        arguments.ids_dir, policy=policy, epochs=epochs, max_examples=arguments.max_examples
    )
    if not results:
        raise common.UsageError(f"--ids-dir {arguments.ids_dir}: no rank*.epoch*.ids records")
    failing = [epoch for epoch, result in results.items() if result.outcome != Outcome.PASS]
    chosen = results[failing[0]] if failing else list(results.values())[-1]
    output = common.result_output(chosen, report_written=False)
    output.report["epochs"] = {
        str(epoch): Outcome(result.outcome).value for epoch, result in results.items()
    }
    if failing:
        # The report is that epoch's audit: its message says which epoch (a missing ID has no
        # epoch of its own in the first violation), and the Epochs section shows the others.
        output.report["message"] = f"epoch {failing[0]}: {chosen.message}"
    return output


def _rank_files(items: list[str]) -> dict[int, Path]:
    files: dict[int, Path] = {}
    for item in items:
        rank_text, separator, path = item.partition("=")
        if not separator or not path:
            raise common.UsageError(f"--ids expects RANK=PATH, got {item!r}")
        try:
            rank = common.non_negative_int(rank_text)
        except argparse.ArgumentTypeError:
            raise common.UsageError(
                f"--ids {item!r}: the rank must be a non-negative integer"
            ) from None
        if rank in files:
            raise common.UsageError(f"--ids gives rank {rank} twice")
        files[rank] = Path(path)
    return files


def _universe(arguments: argparse.Namespace) -> range | list[int] | None:
    if arguments.universe is not None:
        return range(arguments.universe)
    if arguments.universe_file is None:
        return None
    common.require_regular_file(arguments.universe_file, "--universe-file")
    try:
        lines = arguments.universe_file.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise common.UsageError(
            f"--universe-file {arguments.universe_file}: {error.strerror}"
        ) from None
    except UnicodeDecodeError as error:
        raise common.UsageError(
            f"--universe-file {arguments.universe_file}: not UTF-8 text "
            f"(byte {error.object[error.start]:#04x} at offset {error.start}); "
            "give one integer per line"
        ) from None
    identifiers = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            identifiers.append(int(line))
        except ValueError:
            raise common.UsageError(
                f"--universe-file {arguments.universe_file} line {number}: {line.strip()!r} is not an integer ID"
            ) from None
    return identifiers


def _policy(arguments: argparse.Namespace, universe: Any) -> CoveragePolicy:
    from trainparity._internal.coverage.audit import (
        AtLeastOnce,
        ExactlyOnce,
        ExpectedPadding,
        NoCrossRankOverlap,
    )

    if arguments.policy == "expected_padding":
        if arguments.padding_count is None:
            raise common.UsageError("--policy expected_padding needs --padding-count N")
        return ExpectedPadding(universe, arguments.padding_count)
    if arguments.padding_count is not None:
        raise common.UsageError("--padding-count applies to --policy expected_padding only")
    if arguments.policy == "no_cross_rank_overlap":
        return NoCrossRankOverlap()
    if arguments.policy == "exactly_once":
        return ExactlyOnce(universe)
    return AtLeastOnce(universe)
