"""Quickstart: where do two runs of the same training part, and how fast do they drift apart?

    python -m trainparity.quickstarts.trajectory

Trains one tiny model twice in this process, with 1 and with 2 intra-op
threads, recording every step (`trainparity.record`). The model sums a
4M-element float32 product each step; torch splits that sum per thread, so the
two runs round differently from the first step on and the difference grows as
it feeds back through training. Prints the step where the runs part and the
drift curve, writes trajectory-report.html, and exits 0 when the runs part
(as expected) and the drift grows.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import torch
import trainparity
from trainparity import text_report, write_html_report
from trainparity.api import diff_recordings, recording_to

STEPS = 12
WIDE = 1 << 22  # elements of the summed product: big enough for torch to split it per thread


def train(directory: Path, *, threads: int, dtype: torch.dtype = torch.float32) -> None:
    """Train the tiny model for STEPS steps under `threads` intra-op threads, recording each step."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(0)
        wide = torch.randn(WIDE, generator=generator).to(dtype)
        features = torch.randn(32, 8, generator=generator).to(dtype)
        targets = torch.randn(32, 1, generator=generator).to(dtype)
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(9, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
        ).to(dtype)
        embedding = torch.nn.Parameter(torch.randn(WIDE, generator=generator).to(dtype) * 1e-3)
        optimizer = torch.optim.SGD([*model.parameters(), embedding], lr=0.5, momentum=0.9)
        with recording_to(directory, mode="full"):
            for step in range(1, STEPS + 1):
                pooled = (embedding * wide).sum() / WIDE**0.5  # a per-thread split reduction
                inputs = torch.cat([features, pooled.expand(32, 1)], dim=1)
                loss = torch.nn.functional.mse_loss(model(inputs), targets)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                trainparity.record(step, {"model": model.state_dict(), "embedding": embedding})
    finally:
        torch.set_num_threads(previous)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="trainparity-trajectory-") as work:
        one, two = Path(work) / "one-thread", Path(work) / "two-threads"
        train(one, threads=1)
        train(two, threads=2)
        diff = diff_recordings(one, two)
    report = Path("trajectory-report.html")
    write_html_report(report, diff, title="trainparity: 1 vs 2 intra-op threads")
    sys.stdout.write(text_report(diff.to_dict(), max_rows=STEPS))
    errors = [point["max_relative_rms_error"] for point in diff.drift]
    grows = errors[-1] > errors[0] > 0 if diff.first_divergent_step == 1 else errors[-1] > 0
    print(f"\nreport written to {report}")
    if diff.first_divergent_step is None:
        print("unexpected: the runs did not part (one core, or a reduction that is not split?)")
        return 1
    print(
        f"the runs part at step {diff.first_divergent_step}; the relative RMS error goes from "
        f"{errors[diff.compared_steps.index(diff.first_divergent_step)]:.2e} to {errors[-1]:.2e}"
    )
    return 0 if grows else 1


if __name__ == "__main__":
    sys.exit(main())
