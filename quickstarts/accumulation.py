"""Accumulation quickstart: correct accumulation PASSes; unscaled summed losses FAIL at loss accounting.

Run `python -m trainparity.quickstarts.accumulation`: prints both verdicts
(two lines each; `--json`: both reports as JSON) and exits 0 when the clean
plan passes and the intentional fault is caught at
`loss_accounting.denominator`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from trainparity.protocols import LossAccounting, TrainingState
from trainparity.quickstarts._payload import print_payload, quickstart_payload, wants_json

if TYPE_CHECKING:
    import torch


class Case:
    """A one-weight linear model on four ordered samples with a squared-error mean."""

    equivalence = "same four ordered samples; global squared-error mean"

    # torch is imported where the case trains (in the workers), not at the top: the check's
    # own process loads this class but never trains, and stays torch-free in warm mode.
    def build(self, seed: int, device: str) -> TrainingState:
        import torch

        torch.manual_seed(seed)
        model = torch.nn.Linear(1, 1, bias=False).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.9)
        return TrainingState(model, optimizer, scheduler)

    def batch(self, device: str) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        inputs = torch.tensor([[1.0], [2.0], [3.0], [4.0]], dtype=torch.float32, device=device)
        return inputs, inputs * 0.5

    def loss(
        self, state: TrainingState, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> LossAccounting:
        inputs, targets = batch
        squared_errors = (state.model(inputs) - targets).pow(2)
        numerator = squared_errors.sum()
        denominator = int(squared_errors.numel())
        return LossAccounting(
            value=numerator / denominator, numerator=numerator, denominator=denominator
        )


def run() -> dict[str, Any]:
    """Check the clean and the faulty plan and return the quickstart payload."""
    from trainparity import (
        AccumulationExecutionPlan,
        ToleranceComparison,
        check_accumulation,
        shared_warm_servers,
    )

    spec = "trainparity.quickstarts.accumulation:Case"
    comparison = ToleranceComparison(rtol=1e-6, atol=1e-7)
    # Warm (TRAINPARITY_START=warm): the second check's workers fork from the first's server.
    with shared_warm_servers():
        clean = check_accumulation(
            spec, candidate=AccumulationExecutionPlan(2), comparison=comparison
        )
        faulty = check_accumulation(
            spec,
            candidate=AccumulationExecutionPlan(
                2, scale_accumulated_loss=False, use_explicit_loss_accounting=False
            ),
            comparison=comparison,
        )
    return quickstart_payload(clean, faulty)


def main(argv: list[str] | None = None) -> int:
    as_json = wants_json("python -m trainparity.quickstarts.accumulation", argv)
    return print_payload(run(), as_json=as_json)


if __name__ == "__main__":
    sys.exit(main())
