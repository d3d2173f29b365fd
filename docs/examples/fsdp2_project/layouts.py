"""train.py's model on a device mesh: FSDP2 over all ranks, FSDP2 x TP on ("dp", "tp"), or HSDP.

- `dp`: `fully_shard` on a 1-D mesh of every rank.
- `dp-tp`: a ("dp", "tp") mesh of (ranks / 2) x 2. `parallelize_module`
  shards the embedding's rows (RowwiseParallel), the up projection's
  outputs (ColwiseParallel) and the down projection's inputs
  (RowwiseParallel) over "tp"; then `fully_shard` over "dp". The embedding
  and the up projection are then placed (_StridedShard(dim=0, sf=2),
  Shard(dim=0)): FSDP's rows interleave with TP's.
- `hsdp`: `fully_shard` on a ("replicate", "shard") mesh of 2 x (ranks / 2):
  each parameter placed (Replicate(), Shard(dim=0)).

Every rank but the tensor-parallel ones sees its own samples: the
data-parallel rank and size say which (`DataParallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard

LAYOUTS = ("dp", "dp-tp", "hsdp")
DROPOUT = 0.25


class TinyMlp(torch.nn.Module):
    """Embedding(vocabulary, 8), Linear(8, 16), ReLU, dropout from `dropout`'s generator, Linear(16, 1)."""

    def __init__(self, vocabulary: int, dropout: torch.Generator | None) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocabulary, 8)
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 1)
        self.dropout = dropout

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.up(self.embed(tokens)))
        if self.dropout is not None:
            # Under TP each rank holds its own columns of `hidden`: each TP rank draws its own
            # mask, so each rank's generator must come back as it was saved.
            keep = torch.rand(hidden.shape, generator=self.dropout) >= DROPOUT
            hidden = hidden * keep / (1 - DROPOUT)
        return self.down(hidden)


@dataclass(frozen=True)
class DataParallel:
    """Which share of the global batch a rank takes, and whether it reports the sample IDs."""

    rank: int  # this rank's data-parallel index
    size: int  # the number of data-parallel groups
    reports_ids: bool  # one rank per data-parallel group: TP ranks share their samples


def parallel_model(
    layout: str, vocabulary: int, dropout: torch.Generator | None, *, embedding_in_tp: bool = True
) -> tuple[TinyMlp, DataParallel]:
    """TinyMlp placed on `layout`'s mesh over every rank, and this rank's data-parallel place.

    `embedding_in_tp=False` leaves the embedding out of the TP plan: its rows,
    sharded over "tp" otherwise, are then replicated there (a fault's resume).
    """
    world = torch.distributed.get_world_size()
    rank = torch.distributed.get_rank()
    torch.manual_seed(17)  # the same initial weights on every rank, sharded below
    model = TinyMlp(vocabulary, dropout)
    if layout == "dp":
        mesh = init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
        data = DataParallel(rank, world, True)
    elif layout == "dp-tp":
        mesh_2d = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        plan = {"up": ColwiseParallel(), "down": RowwiseParallel()}
        if embedding_in_tp:
            plan["embed"] = RowwiseParallel(input_layouts=Replicate())
        parallelize_module(model, mesh_2d["tp"], plan)
        mesh = mesh_2d["dp"]
        dp_rank, tp_rank = mesh_2d.get_coordinate()
        data = DataParallel(dp_rank, world // 2, tp_rank == 0)
    elif layout == "hsdp":
        mesh = init_device_mesh("cpu", (2, world // 2), mesh_dim_names=("replicate", "shard"))
        data = DataParallel(rank, world, True)  # both mesh dimensions are data parallel
    else:
        raise ValueError(f"unknown layout {layout!r}: one of {', '.join(LAYOUTS)}")
    for layer in (model.embed, model.up, model.down):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, data


def tensor_parallel_rank(layout: str) -> int:
    """This rank's place on the "tp" mesh dimension (0 without TP)."""
    return torch.distributed.get_rank() % 2 if layout == "dp-tp" else 0
