"""A rank of a multi-rank check_accumulation candidate: DDP (or FSDP2) on gloo or nccl.

Each rank (started by accumulation/rank_orchestration.py, one child per rank
with an env rendezvous) takes its contiguous share of the microbatches,
wraps `state.model` in DistributedDataParallel (unless the case built one,
or sharded it with FSDP2's fully_shard: accumulation/sharded.py) and runs
the case's `train_step`, or, for a case without one, our DDP loop with the
plan's multi-rank faults. Every rank publishes its observations; the parent
compares them (rank_orchestration.rank_differences, then rank 0 with the
one-process reference phase by phase).
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import torch

from trainparity._internal.protocols import LossAccounting

__all__ = [
    "RankContext",
    "is_fsdp2",
    "plan_train_step",
    "release_left_groups",
]

# A rank's side ---------------------------------------------------------------------------------


class RankContext:
    """This process's rank: process group, device, DDP wrapping and the sync count."""

    def __init__(self, device: str) -> None:
        import torch.distributed as dist

        self.rank = int(os.environ["RANK"])
        self.world_size = int(os.environ["WORLD_SIZE"])
        self.device = device
        if device.startswith("cuda"):
            local = int(os.environ.get("LOCAL_RANK", self.rank))
            if device == "cuda" and local >= torch.cuda.device_count():
                # nccl cannot put two ranks on one device.
                raise RuntimeError(
                    f"world_size {self.world_size} on CUDA needs one device per rank; "
                    f"{torch.cuda.device_count()} visible"
                )
            self.device = f"cuda:{local}" if device == "cuda" else device
            torch.cuda.set_device(self.device)
        dist.init_process_group(
            "nccl" if device.startswith("cuda") else "gloo", init_method="env://"
        )
        self.gradient_syncs: int | None = None
        self.sharded = False  # the case's model is FSDP2's (fully_shard), not wrapped in DDP

    def share(self, microbatches: list[object]) -> list[object]:
        """This rank's contiguous share of the microbatches."""
        size = len(microbatches) // self.world_size
        return microbatches[self.rank * size : (self.rank + 1) * size]

    def wrap(self, model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
        """(DDP model for the step, the module whose names the reference uses).

        A model the case sharded with FSDP2's `fully_shard` is used as it is:
        its parameter names are the reference's, and FSDP2 offers no
        communication hook, so its gradient synchronisations stay uncounted.
        """
        from torch.nn.parallel import DistributedDataParallel

        if is_fsdp2(model):
            self.sharded = True
            return model, model
        if isinstance(model, DistributedDataParallel):
            wrapped = model
        else:
            device_ids = (
                [torch.device(self.device).index] if self.device.startswith("cuda") else None
            )
            wrapped = DistributedDataParallel(model, device_ids=device_ids)
        self._count_syncs(wrapped)
        return wrapped, wrapped.module

    def _count_syncs(self, model: Any) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        # Unannotated: DDP rejects a hook whose annotations are not its own types.
        def counting_allreduce(state, bucket):  # noqa: ANN001, ANN202
            if bucket.index() == 0:  # once per synchronising backward
                self.gradient_syncs = (self.gradient_syncs or 0) + 1
            return default_hooks.allreduce_hook(None, bucket)

        try:
            model.register_comm_hook(None, counting_allreduce)
        except RuntimeError:
            return  # the case registered its own hook: the count stays unobserved
        self.gradient_syncs = 0

    def combined_loss_record(self, record: dict[str, object] | None) -> dict[str, object] | None:
        """The update's loss record over all ranks: DDP averages, so the effective loss too."""
        import torch.distributed as dist

        reported = torch.tensor([0.0 if record is None else 1.0], device=self.device)
        dist.all_reduce(reported)
        if int(reported.item()) not in (0, self.world_size):
            raise RuntimeError("some ranks' train_step returned losses and others None")
        if record is None:
            return None
        combined = dict(record)
        effective = record["effective_loss"].detach().clone()  # type: ignore[union-attr]
        dist.all_reduce(effective)
        combined["effective_loss"] = effective / self.world_size
        if record["normalization_captured"]:
            numerator = record["numerator"].detach().clone()  # type: ignore[union-attr]
            dist.all_reduce(numerator)
            denominator = torch.tensor(
                [record["denominator"]], dtype=torch.float64, device=self.device
            )
            dist.all_reduce(denominator)
            combined["numerator"] = numerator
            combined["denominator"] = float(denominator.item())
        return combined

    def close(self) -> None:
        """Leave the process group; its Python object is kept until release_left_groups()."""
        import torch.distributed as dist

        if dist.is_initialized():
            _LEFT_GROUPS.append(dist.group.WORLD)
            dist.destroy_process_group()


# Process groups this process has left, alive until release_left_groups(). torch destroys a
# group's gloo backend without the GIL only when the group's Python object is its last owner.
# When DDP's Reducer owns it last, the backend's destructor joins its worker threads with the
# GIL held, while a worker still needs the GIL to free the tensors of the last collective:
# rank 0 of a two-rank check hung there (py-spy: ~ProcessGroupGloo in thread::join, the
# worker in gil_scoped_acquire). Keeping the Python object until DDP is gone makes it last.
# distributed.end_rank, the workaround for user scripts, cannot serve here: it leaves by
# os._exit at the end, but the worker's models are freed earlier, when its execution returns
# (replacing this with end_rank hung a rank in CI: test_multi_rank_mistakes_fail_where_first_
# observed[plan-clip-before-sync]).
_LEFT_GROUPS: list[object] = []


def release_left_groups() -> None:
    """Drop the groups close() kept, once the rank's models (and DDP's Reducer) are gone."""
    if not _LEFT_GROUPS:
        return  # a single-rank child: a full collection of torch's heap would find nothing
    gc.collect()  # a model in a reference cycle would otherwise outlive the group
    _LEFT_GROUPS.clear()


def plan_train_step(
    case: Any, plan: Any, context: RankContext
) -> Callable[[Any, list[object]], list[LossAccounting]]:
    """Our DDP accumulation loop for a case without train_step, with the plan's multi-rank faults.

    Correct: every microbatch's forward and backward inside `no_sync()` except
    the last; explicit accounting divides each numerator by the window's
    token count over all ranks (times world_size, as DDP averages); clip once
    after the synchronising backward. Faults: `no_sync_backward_only` runs the
    forwards outside `no_sync` (DDP then synchronises every backward),
    `sync_first_microbatch` synchronises the first instead of the last,
    `clip_before_sync` clips the local gradients before the last backward,
    `per_rank_loss_normalization` divides by the rank's own token count.
    """
    import torch.distributed as dist

    if context.sharded:
        raise TypeError(
            "build() returned an FSDP2 (fully_shard) model, and the plan's multi-rank loop is "
            "DDP's (no_sync): give the case its own train_step, written for FSDP2"
        )

    def train_step(state: Any, microbatches: list[object]) -> list[LossAccounting]:
        model, optimizer = state.model, state.optimizer
        optimizer.zero_grad(set_to_none=True)
        scale = _loss_scale(case, plan, context, state, microbatches, dist)
        terms = []
        last = len(microbatches) - 1
        for index, microbatch in enumerate(microbatches):
            synchronising = index == (0 if plan.sync_first_microbatch else last)
            if plan.clip_before_sync and synchronising:
                torch.nn.utils.clip_grad_norm_(model.parameters(), plan.clip_grad_norm)
            local = contextlib.nullcontext() if synchronising else model.no_sync()
            if plan.no_sync_backward_only:  # DDP decides at forward time: this syncs anyway
                term = case.loss(state, microbatch)
                with local:
                    loss = scale(term)
                    loss.backward()
            else:
                with local:
                    term = case.loss(state, microbatch)
                    loss = scale(term)
                    loss.backward()
            terms.append(replace(term, value=loss))
        if plan.clip_grad_norm is not None and not plan.clip_before_sync:
            torch.nn.utils.clip_grad_norm_(model.parameters(), plan.clip_grad_norm)
        optimizer.step()
        if state.scheduler is not None:
            state.scheduler.step()
        return terms

    return train_step


def is_fsdp2(model: torch.nn.Module) -> bool:
    """Whether `model` (or a module in it) was sharded with FSDP2's `fully_shard`."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6
        try:
            from torch.distributed._composable.fsdp import FSDPModule
        except ImportError:
            return False
    return any(isinstance(module, FSDPModule) for module in model.modules())


def _loss_scale(case, plan, context, state, microbatches, dist) -> Callable[[Any], torch.Tensor]:
    """How a microbatch's LossAccounting becomes the loss to back-propagate on this rank."""
    if plan.use_explicit_loss_accounting:
        # The token counts come out of loss(); a no-grad pass on the bare module gets them
        # before the first backward, as a trainer counts tokens before its loop.
        named = state.model.module
        with torch.no_grad():
            counts = [case.loss(replace(state, model=named), mb).denominator for mb in microbatches]
        if all(count is not None for count in counts):
            local = float(sum(counts))
            total = torch.tensor([local], dtype=torch.float64, device=context.device)
            dist.all_reduce(total)
            divisor = (
                local
                if plan.per_rank_loss_normalization
                else float(total.item()) / context.world_size
            )
            return lambda term: term.numerator / divisor
    divisor = len(microbatches) if plan.scale_accumulated_loss else 1
    return lambda term: term.value / divisor
