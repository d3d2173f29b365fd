"""`trainparity diff A B`: compare two snapshot files, two traces, or two recordings (directories), recorded anywhere."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """\
python -c "import torch; torch.save({'weight': torch.ones(2, 3)}, 'a.pt'); torch.save({'weight': torch.ones(2, 3) + 1e-6}, 'b.pt')"
trainparity snapshot --checkpoint a.pt --output a.safetensors
trainparity snapshot --checkpoint b.pt --output b.safetensors
trainparity diff a.safetensors b.safetensors --rtol 1e-5 --atol 1e-8
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "diff",
        output_parent,
        summary="Compare two snapshot files (first divergence, worst tensors), two traces "
        "(first divergent op, born or inherited) or two recordings (first divergent step, "
        "drift curve), with environment leads.",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument(
        "baseline",
        type=Path,
        help="snapshot file, trace file or recording directory A (the reference)",
    )
    parser.add_argument(
        "candidate", type=Path, help="snapshot file, trace file or recording directory B"
    )
    parser.add_argument(
        "--rank",
        type=int,
        default=None,
        help="for recordings: the rank to compare (default: the first)",
    )
    parser.add_argument(
        "--common-steps-only",
        action="store_true",
        help="for recordings: compare only the steps both recorded (a resumed run against its "
        "baseline); without it, steps recorded on one side only make equal runs ABSTAIN",
    )
    parser.add_argument(
        "--trust-digests",
        action="store_true",
        help="do not check the files' tensor bytes against their recorded digests "
        "(only for files whose provenance you vouch for; the report says so)",
    )
    common.add_tolerance_options(parser)
    common.add_noise_options(parser, baselines=False)
    parser.add_argument(
        "--noise",
        nargs=2,
        type=Path,
        metavar=("NOISE_A", "NOISE_B"),
        help="for recordings: two recordings whose difference is accepted as noise (1 vs 2 "
        "threads, two repeats); the candidate is judged against it (factor 8 unless "
        "--noise-factor says otherwise)",
    )


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.comparison.snapshots import diff_snapshots
    from trainparity._internal.why.forensics.trace_diff import diff_traces
    from trainparity._internal.why.forensics.trace_file import is_trace_file

    comparison = common.comparison_from(arguments)
    noise_given = getattr(comparison, "name", None) == "noise_envelope"
    if noise_given and arguments.noise is None:
        raise common.UsageError(
            "--noise-factor needs --noise NOISE_A NOISE_B: two recordings that measure the noise"
        )
    if arguments.baseline.is_dir() or arguments.candidate.is_dir():
        return _diff_recordings(arguments, comparison)
    if noise_given:
        raise common.UsageError(
            "--noise-factor judges recordings (directories): snapshots and traces hold one "
            "state each, with no steps to measure noise on"
        )
    traces = [is_trace_file(path) for path in (arguments.baseline, arguments.candidate)]
    if traces[0] != traces[1]:
        trace, other = (
            (arguments.baseline, arguments.candidate)
            if traces[0]
            else (arguments.candidate, arguments.baseline)
        )
        raise common.UsageError(
            f"{trace} is a trace but {other} is not: diff two traces (trainparity trace) or "
            "two snapshots (trainparity snapshot)"
        )
    differ = diff_traces if traces[0] else diff_snapshots
    result = differ(
        arguments.baseline,
        arguments.candidate,
        comparison=comparison,
        trust_digests=arguments.trust_digests,
    )
    return common.result_output(result, report_written=False)


def _diff_recordings(arguments: argparse.Namespace, comparison: Any) -> common.CommandOutput:
    from trainparity._internal.recording.diff import diff_recordings

    for path in (arguments.baseline, arguments.candidate, *(arguments.noise or ())):
        if not path.is_dir():
            raise common.UsageError(f"{path} is not a recording directory: give only recordings")
    # A damaged or unreadable recording raises: main() reports it as ERROR.
    result = diff_recordings(
        arguments.baseline,
        arguments.candidate,
        comparison=comparison,
        rank=arguments.rank,
        trust_digests=arguments.trust_digests,
        common_steps_only=arguments.common_steps_only,
        **({"noise": tuple(arguments.noise)} if arguments.noise is not None else {}),
    )
    return common.result_output(result, report_written=False)
