"""`trainparity trace -- python train.py ...`: trace one training step of an unmodified script."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from trainparity._internal.cli import common

EXAMPLE = """\
trainparity trace --step 3 --output cpu.trace -- python train.py --device cpu
trainparity trace --step 3 --output gpu.trace -- python train.py --device cuda
trainparity diff cpu.trace gpu.trace --report forensics.html
"""


def register(commands: Any, output_parent: argparse.ArgumentParser) -> None:
    parser = common.add_command(
        commands,
        "trace",
        output_parent,
        summary="Run a Python training command and trace one step: every op, module path, "
        "digest and summary.",
        example=EXAMPLE,
        run=run,
    )
    parser.add_argument(
        "--step",
        type=common.positive_int,
        default=1,
        help="the step to trace: the ops from record(N-1) to record(N) in a script that calls "
        "trainparity.record, else from the end of the (N-1)-th optimizer step to the end of "
        "the N-th (default: 1)",
    )
    parser.add_argument(
        "--output", type=Path, required=True, help="the trace file to write (snapshot layout)"
    )
    parser.add_argument(
        "--keep",
        action="append",
        default=[],
        metavar="MODULE",
        help="also keep whole op outputs of this module path (repeatable; '' keeps all)",
    )
    parser.add_argument(
        "training_command",
        nargs=argparse.REMAINDER,
        help="after --: the Python command, e.g. python train.py --lr 0.1",
    )


def run(arguments: argparse.Namespace) -> common.CommandOutput:
    from trainparity._internal.version import add_report_metadata
    from trainparity._internal.why.forensics.step_trace import (
        KEEP_VARIABLE,
        OUTPUT_VARIABLE,
        STEP_VARIABLE,
    )
    from trainparity._internal.why.forensics.trace_file import read_trace

    command = list(arguments.training_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise common.UsageError("give the training command after --, e.g. -- python train.py")
    if not Path(command[0]).name.startswith("python"):
        raise common.UsageError(
            f"the command must start with a Python interpreter (python train.py ...), got "
            f"{command[0]!r}; to trace from inside the script use trainparity.trace(...)"
        )
    if any("," in module for module in arguments.keep):
        raise common.UsageError("--keep takes one module path per option (no commas)")
    output = arguments.output.resolve()
    if output.exists():
        output.unlink()
    environment = dict(os.environ)
    environment.update(
        {
            STEP_VARIABLE: str(arguments.step),
            OUTPUT_VARIABLE: str(output),
            KEEP_VARIABLE: ",".join(arguments.keep),
        }
    )
    child = [command[0], "-m", "trainparity._internal.why.forensics.launch", *command[1:]]
    returncode = subprocess.run(child, env=environment, check=False).returncode
    # The child says why it wrote no trace on stderr ("trainparity: no trace written: ...").
    if returncode != 0:
        raise RuntimeError(
            f"the training command exited with status {returncode}; no trace (its stderr "
            "above says why)"
        )
    if not output.exists():
        raise RuntimeError(
            f"step {arguments.step} never ended (fewer record() calls or optimizer steps ran), "
            "so no trace was written; trace an earlier --step"
        )
    trace = read_trace(output)
    report = add_report_metadata(
        {
            "trace": str(arguments.output),
            "step": trace.step,
            "capture": trace.capture,
            "op_count": len(trace.ops),
            "value_count": len(trace.values),
            "kept_tensor_count": len(trace.kept),
            "environment": trace.environment,
        }
    )
    print(
        f"traced step {trace.step}: {len(trace.ops)} ops, {len(trace.values)} values -> "
        f"{arguments.output}",
        file=sys.stderr,
    )
    return common.CommandOutput(report, outcome=None)
