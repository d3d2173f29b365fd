"""An FSDP2 training script with a DCP checkpoint, on any number of gloo ranks: what check_resume wraps.

    python -m torch.distributed.run --standalone --nproc-per-node=2 train.py \
        --checkpoint ckpt --end-step 4 [--resume ckpt] [--fault NAME]
    python train.py --fork-ranks 2 --checkpoint ckpt --end-step 4 [...]
    python train.py --fork-ranks 4 --layout dp-tp --global-batch 12 --dropout ...

Under torchrun each process is one rank. `--fork-ranks N` starts the N
ranks itself instead, forked from this process once its imports are done
(torch.multiprocessing, as PyTorch's FSDP tutorial does with mp.spawn): the
ranks then skip the interpreter start and imports that torchrun's fresh
rank processes and its agent each pay.

The model is an `Embedding(257, 8)` (257 rows: uneven shards on 2 or 3
ranks) and a `Linear(8, 1)`, each wrapped with `fully_shard`, then the
root. AdamW and a warm-up LambdaLR. A step is one optimizer step over a
global batch of 6 samples; rank r of W takes the r-th of W equal parts of
it, so the global batch, its order and the averaged
gradient do not depend on W (only float rounding does). The checkpoint is a
DCP directory written through `get_state_dict` and read back through
`set_state_dict`, so it loads on any world size, plus one RNG file per rank.
`record()` runs right after loading (or building) and after every step.

`--layout` (layouts.py) trains a small MLP on a device mesh instead: `dp`
(FSDP2 over every rank), `dp-tp` (FSDP2 x TP on a ("dp", "tp") mesh) or
`hsdp`, with `--dropout` drawn from one generator per rank (saved per rank).
The global batch (`--global-batch`) is split over the data-parallel ranks;
tensor-parallel ranks share their group's samples.

`--fault` names an intentional resume bug (docs/distributed.md, "FSDP2"):
fresh-optimizer-load, uneven-shard-offsets, cached-state-dict-hook,
scheduler-not-restored; for a resume on another world size,
per-rank-sampler-position, per-rank-step-counter, optimizer-dropped-on-reshard;
for check_runs of 2 ranks against 1, sum-gradients; on a 2-D mesh
("2-D meshes"), tp-optimizer-dropped, embedding-replicated-on-load,
tp-rng-not-restored; and for a resume on another layout (dp4 <-> dp2 x tp2),
moments-zeroed-on-reshard.
"""

import argparse
import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # torch < 2.6
    from torch.distributed._composable.fsdp import fully_shard

import trainparity
from layouts import LAYOUTS, DataParallel, parallel_model, tensor_parallel_rank
from trainparity.checkpoints import load_dcp
from trainparity.distributed import end_rank

VOCABULARY = 257
GLOBAL_BATCH = 6  # divisible by 1, 2 and 3 ranks (--global-batch 12 for 2 and 4)
SAMPLES = 60


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--end-step", type=int, required=True)
    parser.add_argument("--resume", type=Path)
    parser.add_argument("--fault")
    parser.add_argument("--record-gradients", action="store_true")
    parser.add_argument("--fork-ranks", type=int, help="start this many ranks here, no torchrun")
    parser.add_argument("--layout", choices=LAYOUTS, help="the MLP on a device mesh (layouts.py)")
    parser.add_argument("--global-batch", type=int, default=GLOBAL_BATCH)
    parser.add_argument("--dropout", action="store_true", help="dropout, one generator per rank")
    args = parser.parse_args()
    if args.fork_ranks is not None:
        fork_ranks(args)
    else:
        train(args)


def fork_ranks(args) -> None:
    """Run train() on args.fork_ranks forked ranks, with torchrun's environment rendezvous."""
    with socket.socket() as probe:  # a free port now; rank 0 binds it a moment later
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # fully_shard imports torch._dynamo on first use (a second of CPU): once here, not per rank.
    import torch._dynamo  # noqa: F401

    # join: a rank that fails (its traceback on stderr) ends the others and raises here.
    torch.multiprocessing.start_processes(
        _forked_rank, args=(args, port), nprocs=args.fork_ranks, start_method="fork"
    )


def _forked_rank(rank: int, args, port: int) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(args.fork_ranks),
    )
    train(args)


def train(args) -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # Each rank its own dropout stream (TP ranks hold different columns).
    dropout = torch.Generator().manual_seed(100 + rank) if args.dropout else None
    if args.layout is not None:
        resumed_wrongly = args.resume is not None and args.fault == "embedding-replicated-on-load"
        model, data = parallel_model(
            args.layout, VOCABULARY, dropout, embedding_in_tp=not resumed_wrongly
        )
    else:
        torch.manual_seed(17)  # the same initial weights on every rank, sharded below
        model = torch.nn.Sequential(torch.nn.Embedding(VOCABULARY, 8), torch.nn.Linear(8, 1))
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        data = DataParallel(rank, world_size, True)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 4))
    # Noise drawn for the whole global batch from one generator that every rank advances
    # alike: the same on any number of ranks. Saved per rank, like any RNG state.
    noise = torch.Generator().manual_seed(5)

    cached_model_state = None
    if args.fault == "cached-state-dict-hook":
        # The bug (torchtitan#3675): a state dict cached once at start, plus a hook that
        # copies tensors as the dict is made, so the cache holds the initial weights.
        model.register_state_dict_post_hook(_detached_copies)
        cached_model_state = get_state_dict(model, optimizer)[0]

    step = position = 0  # position: the sampler sequence's index of the step's first sample
    if args.resume is not None:
        step, position = load(args, model, optimizer, scheduler, noise, dropout, data)
    trainparity.record(step, observed(model, scheduler, optimizer, dropout, step, args))

    order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(3))
    tokens = torch.randint(VOCABULARY, (SAMPLES,), generator=torch.Generator().manual_seed(4))
    while step < args.end_step:
        # This rank's samples of the step: the dp-th of the data-parallel size's equal parts of
        # the global batch, so the parts joined in order are the global batch on any layout.
        share = args.global_batch // data.size
        first = data.rank * share
        indices = range(position + first, position + first + share)
        picked = order[[index % SAMPLES for index in indices]]
        if data.reports_ids:
            trainparity.record_ids(picked.tolist(), epoch=0)
        jitter = torch.rand(args.global_batch, generator=noise)[first : first + share] * 1e-2
        prediction = model(tokens[picked]).squeeze(1)
        target = tokens[picked].float() / VOCABULARY + jitter
        loss = torch.nn.functional.mse_loss(prediction, target)  # FSDP averages it over ranks
        optimizer.zero_grad()
        loss.backward()
        if args.fault == "sum-gradients":
            # The bug (pytorch#162338's symptom): the gradients summed over the ranks, not
            # averaged. (FSDP2's own switch, set_gradient_divide_factor(1.0), needs a
            # PREMUL_SUM reduction, which gloo lacks.)
            for parameter in model.parameters():
                parameter.grad.mul_(world_size)
        optimizer.step()
        scheduler.step()
        step += 1
        position += args.global_batch
        trainparity.record(step, observed(model, scheduler, optimizer, dropout, step, args))

    save(args, model, optimizer, scheduler, (noise, dropout), step, data, cached_model_state)
    end_rank()


def _detached_copies(module, state_dict, prefix, local_metadata) -> None:
    for key, value in state_dict.items():
        state_dict[key] = value.detach().clone()


def observed(model, scheduler, optimizer, dropout, step: int, args) -> dict:
    """What record() keeps: the sharded model and optimizer (each rank its local shards), LR, step.

    With --record-gradients also the step's gradients (sharded too), for check_runs;
    with --dropout this rank's dropout generator.
    """
    model_state, optimizer_state = get_state_dict(model, optimizer)
    state = {
        "model": model_state,
        "optim": optimizer_state,
        "train": {"step": step, "lr": scheduler.get_last_lr()[0], "epoch": scheduler.last_epoch},
    }
    if args.record_gradients:
        state["grad"] = {name: parameter.grad for name, parameter in model.named_parameters()}
    if dropout is not None:
        state["rng"] = {"dropout": dropout.get_state()}
    return state


def save(args, model, optimizer, scheduler, generators, step, data, cached_model_state) -> None:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    if cached_model_state is not None:
        model_state = cached_model_state
    train = {
        "step": step,
        "scheduler_epoch": scheduler.last_epoch,
        # What this rank consumed: the per-rank faults resume from it.
        "samples_per_rank": step * args.global_batch // data.size,
    }
    dcp.save(
        {"model": model_state, "optim": optimizer_state, "train": train},
        checkpoint_id=args.checkpoint,
    )
    noise, dropout = generators
    rank = dist.get_rank()
    torch.save(noise.get_state(), args.checkpoint / f"rng-rank{rank}.pt")
    if dropout is not None:
        torch.save(dropout.get_state(), args.checkpoint / f"dropout-rank{rank}.pt")
    if rank == 0:  # which layout saved: a resume on another one reshards
        (args.checkpoint / "layout.txt").write_text(f"{args.layout} {dist.get_world_size()}\n")
    dist.barrier()  # every rank's files exist before any rank exits


def load(args, model, optimizer, scheduler, noise, dropout, data) -> tuple[int, int]:
    """Restore what save() wrote, on any world size; returns (step, data position) to continue from."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if args.fault == "fresh-optimizer-load":
        # The bug: a fresh optimizer's state_dict() holds no moments yet; dcp.load fills
        # only what it is given, so the optimizer resumes with none (no error).
        model_state, optimizer_state = model.state_dict(), optimizer.state_dict()
    else:
        # get_state_dict gives the fresh optimizer placeholder moments for dcp.load to fill.
        model_state, optimizer_state = get_state_dict(model, optimizer)
    if args.fault == "tp-optimizer-dropped":
        # The bug: the moments of the tensor-parallel parameters (DTensors on the 2-D mesh)
        # are left out of what is loaded, so AdamW starts them again from zero.
        for name in ("embed.weight", "up.weight", "up.bias", "down.weight"):
            del optimizer_state["state"][name]
    train = {"step": 0, "scheduler_epoch": 0, "samples_per_rank": 0}
    state = {"model": model_state, "optim": optimizer_state, "train": train}
    saved_layout = args.resume / "layout.txt"
    resharded = len(list(args.resume.glob("rng-rank*.pt"))) != world_size or (
        saved_layout.exists() and saved_layout.read_text().split()[0] != str(args.layout)
    )
    if args.fault == "optimizer-dropped-on-reshard" and resharded:
        # The bug: "optimizer state cannot be resharded", so only the model is loaded.
        del state["optim"]
    dcp.load(state, checkpoint_id=args.resume)
    if args.fault == "fresh-optimizer-load":
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
    elif "optim" not in state:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(
            model,
            optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            # The dropped moments would stop a strict load; the bug's author turned it off.
            options=StateDictOptions(strict=args.fault != "tp-optimizer-dropped"),
        )
    if args.fault == "moments-zeroed-on-reshard" and resharded:
        # The bug (Megatron-LM#5077's class): the resharded optimizer state arrives as zeros.
        for moments in optimizer.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                moments[key].zero_()
    if args.fault == "uneven-shard-offsets":
        _copy_embedding_rows_by_hand(args.resume, model, rank, world_size)
    if args.fault != "scheduler-not-restored":
        epoch = train["scheduler_epoch"]
        restored = scheduler.state_dict()
        restored.update(last_epoch=epoch, _step_count=epoch + 1)
        restored["_last_lr"] = [group["lr"] for group in optimizer.param_groups]
        scheduler.load_state_dict(restored)
    own = args.resume / f"rng-rank{rank}.pt"
    # The generator is the same on every rank: on another world size any rank's file restores it.
    noise.set_state(torch.load(own if own.exists() else args.resume / "rng-rank0.pt"))
    own_dropout = args.resume / f"dropout-rank{rank}.pt"
    if dropout is not None and own_dropout.exists():
        if args.fault == "tp-rng-not-restored" and tensor_parallel_rank(args.layout) == 1:
            pass  # The bug: the second TP rank of each group keeps its freshly seeded stream.
        else:
            dropout.set_state(torch.load(own_dropout))
    step, position = train["step"], train["step"] * args.global_batch
    if args.fault == "per-rank-sampler-position":
        # The bug: the position in the rank's own units, times the new rank count.
        position = train["samples_per_rank"] * data.size
    if args.fault == "per-rank-step-counter":
        # The bug: the step recounted from this rank's samples at the new local batch size.
        step = train["samples_per_rank"] // (args.global_batch // data.size)
    return step, position


def _copy_embedding_rows_by_hand(checkpoint: Path, model, rank: int, world_size: int) -> None:
    """The bug (torchtitan#1136's kind): a shard restored by hand at offset rank * (rows // W).

    torch's shards are chunks of ceil(rows / W) rows, so with 257 rows every rank
    after the first starts one row later than this computes: only the last rank's
    shard (on 2 ranks) comes back shifted.
    """
    full = load_dcp(checkpoint, keys={"model"})["model"]["0.weight"]
    local = model[0].weight.to_local()
    start = rank * (VOCABULARY // world_size)
    with torch.no_grad():
        local.copy_(full[start : start + local.shape[0]])


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
