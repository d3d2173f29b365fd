"""DDP programs on 2 gloo ranks under torchrun: DistributedSampler with set_epoch, DCP checkpoints.

The script is ddp_train.py; every phase is one torchrun job
(`trainparity.distributed.torchrun_command`). 2 ranks, 16 samples, 4 a
rank per step: 2 steps an epoch, so a split at step 3 of 4 falls in the
middle of the second epoch, where the sampler's epoch matters. What is
compared is the final DCP checkpoint with each rank's RNG file and the
scheduler, the records of every step on every rank, and the sample IDs
each rank trained on (`record_ids`).
"""

from __future__ import annotations

from benchmarks.corpus.programs.frameworks.common import TwoRankDcpCase, resume_entry

MODULE = "benchmarks.corpus.programs.frameworks.ddp_cases"


class _DdpCase(TwoRankDcpCase):
    name = "ddp"
    script = "ddp_train.py"
    split_step = 3
    total_step = 4


class SgdResume(_DdpCase):
    name = "ddp_mlp_sgd_multistep"
    arguments = ("--program", "sgd")


class SgdResumeNoisy(SgdResume):
    arguments = (*SgdResume.arguments, "--noisy")


class SgdSetEpochMissing(SgdResume):
    arguments = (*SgdResume.arguments, "--fault", "set-epoch-missing")


class SgdRankRngNotRestored(SgdResume):
    arguments = (*SgdResume.arguments, "--fault", "rank-rng-not-restored")


class AdamwResume(_DdpCase):
    name = "ddp_mlp_adamw_accum_clip"
    arguments = ("--program", "adamw")


class AdamwResumeNoisy(AdamwResume):
    arguments = (*AdamwResume.arguments, "--noisy")


class AdamwFreshOptimizerLoad(AdamwResume):
    arguments = (*AdamwResume.arguments, "--fault", "fresh-optimizer-load")


SGD = "ddp_mlp_sgd_multistep"
ADAMW = "ddp_mlp_adamw_accum_clip"

ENTRIES = [
    resume_entry(
        SGD,
        f"{MODULE}:SgdResume",
        form="deterministic",
        note="DDP on 2 gloo ranks, MLP with dropout (a stream per rank), SGD momentum, "
        "MultiStepLR, DistributedSampler + set_epoch, DCP and per-rank RNG files",
    ),
    resume_entry(
        SGD,
        f"{MODULE}:SgdResumeNoisy",
        form="nondeterministic",
        note="the same, each rank's loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        ADAMW,
        f"{MODULE}:AdamwResume",
        form="deterministic",
        note="DDP on 2 gloo ranks, AdamW with warm-up, 2 microbatches (no_sync), clipping",
    ),
    resume_entry(
        ADAMW,
        f"{MODULE}:AdamwResumeNoisy",
        form="nondeterministic",
        note="the same, each rank's loss scaled by 1 summed in an os.urandom order",
    ),
    resume_entry(
        SGD,
        f"{MODULE}:SgdSetEpochMissing",
        form="deterministic",
        fault="sampler_epoch",
        expect_path="coverage.epoch1.rank",
        expect_step=4,
        note="the resumed epoch's sampler.set_epoch is skipped: epoch 0's order again",
    ),
    resume_entry(
        SGD,
        f"{MODULE}:SgdRankRngNotRestored",
        form="deterministic",
        fault="rng",
        expect_path="rank1.rng",
        expect_step=3,  # the record right after loading
        note="every rank restores rank 0's RNG file: rank 1's dropout stream is lost",
    ),
    resume_entry(
        ADAMW,
        f"{MODULE}:AdamwFreshOptimizerLoad",
        form="deterministic",
        fault="optimizer_moments",
        expect_path="rank0.optimizer",
        expect_step=3,
        note="dcp.load into a fresh optimizer's state_dict(): Adam's moments silently lost",
    ),
]
