"""FSDP2 programs on 2 gloo ranks under torchrun: `fully_shard` per layer, DCP checkpoints.

The script is fsdp2_train.py; every phase is one torchrun job
(`trainparity.distributed.torchrun_command`). A split at step 2 of 4. What
is compared is the final DCP checkpoint with the scheduler and each rank's
RNG file, the records of every step on every rank (each rank's local
shards), and the sample IDs each rank trained on (`record_ids`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from benchmarks.corpus.programs.frameworks.common import PROGRAMS, resume_entry

MODULE = "benchmarks.corpus.programs.frameworks.fsdp2_cases"
RANKS = 2


class _FsdpCase:
    name = "fsdp2"
    split_step = 2
    total_step = 4
    arguments: tuple[str, ...] = ()

    def command(self, plan) -> list[str]:
        from trainparity.distributed import torchrun_command

        script = [
            str(PROGRAMS / "fsdp2_train.py"),
            "--checkpoint",
            str(self.checkpoint_path(plan.run_dir)),
            "--end-step",
            str(plan.end_step),
            "--total-steps",
            str(self.total_step),
            *self.arguments,
        ]
        if plan.resume_from is not None:
            script += ["--resume", str(plan.resume_from)]
        return torchrun_command(script, nproc_per_node=RANKS, log_dir=plan.run_dir / "ranks")

    def checkpoint_path(self, run_dir: Path) -> Path:
        return run_dir / "checkpoint"  # a DCP directory

    def observe_checkpoint(self, path: Path) -> Mapping[str, object]:
        import torch
        from trainparity.checkpoints import load_dcp

        state = load_dcp(path)  # model, optim, train: read from the directory, no process group
        state["scheduler"] = torch.load(path / "scheduler.pt", weights_only=False)
        state["rng"] = {
            f"rank{rank}": torch.load(path / f"rng-rank{rank}.pt", weights_only=True)
            for rank in range(RANKS)
        }
        return state


class EmbedResume(_FsdpCase):
    name = "fsdp2_embedding_layernorm_adamw_warmup"
    arguments = ("--program", "embed")


class EmbedResumeNoisy(EmbedResume):
    arguments = (*EmbedResume.arguments, "--noisy")


class EmbedOptimizerNotSaved(EmbedResume):
    arguments = (*EmbedResume.arguments, "--fault", "optimizer-not-saved")


class MlpResume(_FsdpCase):
    name = "fsdp2_mlp_dropout_sgd_cosine"
    arguments = ("--program", "mlp")


class MlpResumeNoisy(MlpResume):
    arguments = (*MlpResume.arguments, "--noisy")


class MlpPositionNotSkipped(MlpResume):
    arguments = (*MlpResume.arguments, "--fault", "position-not-skipped")


EMBED = "fsdp2_embedding_layernorm_adamw_warmup"
MLP = "fsdp2_mlp_dropout_sgd_cosine"

ENTRIES = [
    resume_entry(
        EMBED,
        f"{MODULE}:EmbedResume",
        form="deterministic",
        note="FSDP2 on 2 gloo ranks, Embedding (uneven shards), LayerNorm, 1-output head, "
        "AdamW with warm-up, DCP through get_state_dict/set_state_dict",
    ),
    resume_entry(
        EMBED,
        f"{MODULE}:EmbedResumeNoisy",
        form="nondeterministic",
        note="the same, each rank's loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpResume",
        form="deterministic",
        note="FSDP2 on 2 gloo ranks, MLP with dropout (a stream per rank), SGD momentum, cosine",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpResumeNoisy",
        form="nondeterministic",
        note="the same, each rank's loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        EMBED,
        f"{MODULE}:EmbedOptimizerNotSaved",
        form="deterministic",
        fault="optimizer_moments",
        expect_path="rank0.optim",
        expect_step=2,  # the record right after loading
        note="the DCP checkpoint holds model and step only: a fresh optimizer on resume",
    ),
    resume_entry(
        MLP,
        f"{MODULE}:MlpPositionNotSkipped",
        form="deterministic",
        fault="data_position",
        expect_path="coverage.epoch0.rank0",
        expect_step=3,
        note="the resumed run reads the data from its start: the first global batch again",
    ),
]
