"""The accumulation quickstart's case with its own train_step, for benchmarks/bench_own_step.py.

One train_step serves one rank and several: under a process group it scales
by world_size over the token count of all ranks and syncs only the last
microbatch, as a DDP trainer does.
"""

from __future__ import annotations

import contextlib

import torch
from trainparity.protocols import LossAccounting, TrainingState
from trainparity.quickstarts.accumulation import Case


class OwnStepCase(Case):
    """The quickstart's model, optimizer, scheduler and loss, stepped by a user's loop."""

    def train_step(self, state: TrainingState, microbatches: list) -> list[LossAccounting]:
        # Imported here, not at the top: the baselines never need it, and the benchmark
        # measures trainparity's overhead, not this module's imports.
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized()
        world_size = dist.get_world_size() if distributed else 1
        count = torch.tensor([float(sum(len(inputs) for inputs, _ in microbatches))])
        if distributed:
            dist.all_reduce(count)
        scale = world_size / float(count.item())
        state.optimizer.zero_grad(set_to_none=True)
        terms = []
        for index, microbatch in enumerate(microbatches):
            last = index == len(microbatches) - 1
            local = contextlib.nullcontext() if last or not distributed else state.model.no_sync()
            with local:
                term = self.loss(state, microbatch)
                loss = term.numerator * scale
                loss.backward()
            terms.append(LossAccounting(loss, term.numerator, term.denominator))
        state.optimizer.step()
        state.scheduler.step()
        return terms
