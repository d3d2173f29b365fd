"""FSDP2 programs on 2 gloo ranks under torchrun: `fully_shard` per layer, DCP checkpoints.

The script is fsdp2_train.py; every phase is one torchrun job
(`trainparity.distributed.torchrun_command`). A split at step 2 of 4. What
is compared is the final DCP checkpoint with the scheduler and each rank's
RNG file, the records of every step on every rank (each rank's local
shards), and the sample IDs each rank trained on (`record_ids`).
"""

from __future__ import annotations

from benchmarks.corpus.programs.frameworks.common import TwoRankDcpCase, resume_entry

MODULE = "benchmarks.corpus.programs.frameworks.fsdp2_cases"


class _FsdpCase(TwoRankDcpCase):
    name = "fsdp2"
    script = "fsdp2_train.py"
    split_step = 2
    total_step = 4
    pass_total_steps = True


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
