"""Measures what tracing one training step costs, and how fast two traces of 10k ops are diffed.

Targets: tracing one step of a 50M-parameter MLP on the CPU (summary mode:
digests and summaries, trace file written) takes at most 3x the untraced
step; diffing two traces of 10,000 ops (reading and verifying both files
included) takes at most 1 s. All figures are medians of --repeats timed runs
after a warm-up, measured in one run so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch
from timing import median_seconds
from trainparity import trace
from trainparity._internal.why.forensics import diff_traces

TARGET_TRACE_RATIO = 3.0
TARGET_DIFF_SECONDS = 1.0


def mlp(width: int, depth: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers)


def many_small_ops(count: int) -> None:
    """`count` element-wise ops on a small tensor: a trace with `count` ops."""
    value = torch.linspace(-1.0, 1.0, 64)
    for index in range(count // 2):
        value = torch.tanh(value * (1.0 + 1e-4 * (index % 7)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--width", type=int, default=3536, help="MLP width (default: 50M params)")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--ops", type=int, default=10_000, help="ops in each diffed trace")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = mlp(args.width, args.depth)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    batch = torch.randn(args.batch, args.width)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        model(batch).square().mean().backward()
        optimizer.step()

    with tempfile.TemporaryDirectory(prefix="trainparity-bench-trace-") as directory:
        folder = Path(directory)
        untraced = median_seconds(step, args.repeats)
        traced = median_seconds(
            lambda: trace(folder / "step.trace", model=model, inputs={"batch": batch}, run=step),
            args.repeats,
        )
        step_ops = len(trace(None, model=model, run=step).ops)
        for name in ("a", "b"):
            trace(folder / f"{name}.trace", run=lambda: many_small_ops(args.ops))
        diff = diff_traces(folder / "a.trace", folder / "b.trace")
        assert diff.compared_op_count >= args.ops, diff.message
        diff_seconds = median_seconds(
            lambda: diff_traces(folder / "a.trace", folder / "b.trace"), args.repeats
        )
        trace_bytes = (folder / "a.trace").stat().st_size

    figures = {
        "machine": {"processor": platform.processor() or platform.machine(),
                    "torch_threads": torch.get_num_threads(), "torch": torch.__version__},
        "mlp_parameters": parameters,
        "step_ops": step_ops,
        "untraced_step_seconds": untraced,
        "traced_step_seconds": traced,
        "trace_ratio": traced / untraced,
        "trace_ratio_target": TARGET_TRACE_RATIO,
        "diff_ops": diff.compared_op_count,
        "diff_trace_file_bytes": trace_bytes,
        "diff_seconds": diff_seconds,
        "diff_seconds_target": TARGET_DIFF_SECONDS,
    }  # fmt: skip
    print(json.dumps(figures, indent=2))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    met = traced / untraced <= TARGET_TRACE_RATIO and diff_seconds <= TARGET_DIFF_SECONDS
    print("targets met" if met else "TARGETS MISSED")


if __name__ == "__main__":
    main()
