"""Forensics quickstart: the same float32 step on 1 and 2 threads parts in a reduction op.

Run `python -m trainparity.quickstarts.forensics [DIRECTORY]`: traces one
training step of a small encoder in two fresh processes (torch on 1 and on
2 intra-op threads), diffs the traces, prints the report and writes
`forensics-report.html` (and the two traces) to DIRECTORY (default: the
current directory). Exits 0 when the first divergence is found born in a
reduction with the thread-count lead, 1 otherwise.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import torch


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width)
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.mlp(hidden)


class Encoder(torch.nn.Module):
    """Two residual MLP blocks and a loss of three reductions over all 4M activations.

    Whether 1 and 2 threads round one reduction alike depends on the data; with
    three, a divergence is all but certain on any machine.
    """

    def __init__(self, width: int = 64, depth: int = 2) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        hidden = batch
        for layer in self.layers:
            hidden = layer(hidden)
        return hidden.tanh().exp().mean() + hidden.sum() * 1e-6 + hidden.square().mean()


def traced_step(output: Path, threads: int) -> None:
    """One SGD step from fixed seeds on `threads` intra-op threads, traced to `output`."""
    import trainparity

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = Encoder()
    batch = torch.randn(65536, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        model(batch).backward()
        optimizer.step()

    trainparity.trace(output, model=model, inputs={"batch": batch}, run=step, step=1)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        traced_step(Path(argv[1]), int(argv[2]))
        return 0
    from trainparity import diff_traces, text_report, write_html_report

    directory = Path(argv[0] if argv else ".")
    directory.mkdir(parents=True, exist_ok=True)
    traces = [directory / f"threads{threads}.trace" for threads in (1, 2)]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "trainparity.quickstarts.forensics", "--child", str(path),
             str(threads)],
            env={**os.environ, "OMP_NUM_THREADS": str(threads)},
        )
        for threads, path in zip((1, 2), traces, strict=True)
    ]  # fmt: skip
    if any(child.wait() != 0 for child in children):
        print("a traced child failed; see its error above", file=sys.stderr)
        return 1
    diff = diff_traces(*traces)
    report = directory / "forensics-report.html"
    write_html_report(report, diff, title="trainparity forensics: 1 vs 2 threads")
    sys.stdout.write(text_report(diff.to_dict()))
    print(f"report written to {report}", file=sys.stderr)
    first = diff.first_divergence or {}
    found = first.get("origin") == "born" and first.get("op_kind") == "reduction"
    return 0 if found and diff.environment_leads[0].category == "threads" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
