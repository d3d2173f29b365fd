"""The plain-PyTorch part of the verdict corpus: programs of plain_train.py and their faults.

A program is a set of plain_train.py flags: what a user's script is made of.
Each clean program is checked in a deterministic form (ExactComparison) and a
nondeterministic one (`--noisy`, NoiseComparison()), as docs/resume.md
recommends; each planted fault names where it must show: the path of the
component that was not restored and the step of the record where it first
differs (split_step, the record right after loading, for state that is not
restored; split_step + 1 for data that is trained on the wrong way).
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.corpus import Entry

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = "benchmarks/corpus/programs/plain_train.py"
OBSERVE = "benchmarks.corpus.programs.plain_train:observe"
ACCUMULATION = "benchmarks.corpus.programs.plain_accumulation"
SPLIT_STEP, TOTAL_STEP = 5, 7  # 4 batches an epoch: the split falls inside epoch 1 (or 2)
COVERAGE_TOTAL_STEP = 8  # epoch 1 ends with the run: the chain's audit sees it whole
SAMPLES = 16  # plain_train.SAMPLES
AFTER_LOAD, FIRST_RESUMED = SPLIT_STEP, SPLIT_STEP + 1
# A restored StatefulDataLoader hands the first resumed batch to the worker next in turn, which
# had drawn nothing yet in epoch 1 of the uninterrupted run either: a worker's RNG restarted by
# the resume shows from the batch after, that of a worker which had already drawn.
SECOND_RESUMED = SPLIT_STEP + 2

# Every check's children: one thread, a fixed hash seed (warm servers are shared only then).
ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "TRAINPARITY_WARM_PRELOAD": "torch._dynamo",
    "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
}

# name: (flags, what the program is)
PROGRAMS: dict[str, tuple[tuple[str, ...], str]] = {
    "mlp_adamw_cosine": (
        (),
        "MLP with LayerNorm and dropout, AdamW, warmup+cosine (LambdaLR), shuffled loader, islice",
    ),
    "transformer_adamw_accum_clip": (
        ("--model", "transformer", "--scheduler", "sequential", "--accum", "2", "--clip", "1.0"),
        "transformer with dropout, AdamW, LinearLR+cosine (SequentialLR), 2 microbatches, clip",
    ),
    "cnn_bn_sgd_multistep": (
        ("--model", "cnn", "--optimizer", "sgd", "--scheduler", "multistep"),
        "CNN with BatchNorm and dropout, SGD with momentum, MultiStepLR",
    ),
    "cnn_bn_sgd_onecycle": (
        ("--model", "cnn", "--optimizer", "sgd", "--scheduler", "onecycle"),
        "CNN with BatchNorm, SGD with momentum, OneCycleLR (cycles the momentum too)",
    ),
    "mlp_sgd_plateau": (
        ("--optimizer", "sgd", "--scheduler", "plateau"),
        "MLP, SGD with momentum, ReduceLROnPlateau on the step's loss",
    ),
    "mlp_adafactor_cosine": (
        ("--optimizer", "adafactor"),
        "MLP, torch.optim.Adafactor (factored second moments), warmup+cosine",
    ),
    "transformer_lion_multistep": (
        ("--model", "transformer", "--optimizer", "lion", "--scheduler", "multistep"),
        "transformer, a hand-written Lion, MultiStepLR",
    ),
    "tiny_sgd_multistep": (
        ("--model", "tiny", "--optimizer", "sgd", "--scheduler", "multistep"),
        "MLP with a 1-element output bias, a 1-element temperature and a 1-element buffer, SGD",
    ),
    "tiny_adamw_plateau": (
        ("--model", "tiny", "--scheduler", "plateau"),
        "the 1-element tensors with AdamW and ReduceLROnPlateau",
    ),
    "mlp_random_sampler": (
        ("--loader", "random_sampler"),
        "MLP, a seeded RandomSampler",
    ),
    "cnn_weighted_sampler": (
        (
            "--model",
            "cnn",
            "--optimizer",
            "sgd",
            "--scheduler",
            "multistep",
            "--loader",
            "weighted",
        ),
        "CNN, a seeded WeightedRandomSampler (with replacement)",
    ),
    "mlp_workers2_augment": (
        ("--workers", "2", "--augment", "worker_rng"),
        "MLP, 2 loader workers adding noise from their own RNG (seeded from the loader's "
        "generator), islice",
    ),
    "cnn_stateful_loader": (
        ("--model", "cnn", "--optimizer", "sgd", "--loader", "stateful", "--augment", "per_sample"),
        "CNN, torchdata StatefulDataLoader restored from its state_dict, per-sample augmentation",
    ),
    "mlp_stateful_workers2": (
        ("--loader", "stateful", "--workers", "2", "--augment", "per_sample"),
        "MLP, StatefulDataLoader with 2 workers, per-sample seeded augmentation",
    ),
    "mlp_distributed_sampler": (
        ("--optimizer", "sgd", "--scheduler", "multistep", "--loader", "distributed"),
        "MLP, DistributedSampler (1 replica) with set_epoch per epoch",
    ),
    "transformer_autoresume": (
        ("--model", "transformer", "--accum", "2", "--clip", "1.0", "--auto-resume"),
        "transformer, checkpoints every 2 steps into a directory, auto-resume from the newest",
    ),
    "mlp_ema_autoresume": (
        ("--ema", "--auto-resume"),
        "MLP, an EMA of the weights with a warm-up counter, auto-resume from a directory",
    ),
    "transformer_onecycle_ema": (
        ("--model", "transformer", "--scheduler", "onecycle", "--ema"),
        "transformer, AdamW with OneCycleLR, EMA",
    ),
    "mlp_bf16_autocast": (
        ("--amp", "bf16"),
        "MLP under bf16 autocast on CPU",
    ),
    "cnn_fp16_gradscaler": (
        ("--model", "cnn", "--optimizer", "sgd", "--scheduler", "multistep", "--amp", "fp16"),
        "CNN under fp16 autocast on CPU with a GradScaler",
    ),
    "mlp_fp16_gradscaler_accum": (
        ("--amp", "fp16", "--accum", "2", "--clip", "0.5"),
        "MLP, fp16 autocast, GradScaler, 2 microbatches, unscale then clip",
    ),
    "mlp_compile": (
        ("--compile",),
        "MLP under torch.compile (inductor), the compiled module's state_dict saved",
    ),
}

# Programs whose coverage is audited: the loader wrapped in trainparity.distributed.track_ids.
COVERAGE_PROGRAMS: dict[str, tuple[tuple[str, ...], str]] = {
    "mlp_track_ids": (("--track-ids",), "MLP, shuffled loader, islice, track_ids"),
    "cnn_stateful_track_ids": (
        ("--model", "cnn", "--optimizer", "sgd", "--loader", "stateful", "--track-ids"),
        "CNN, StatefulDataLoader, track_ids",
    ),
    "mlp_distributed_track_ids": (
        ("--optimizer", "sgd", "--loader", "distributed", "--track-ids"),
        "MLP, DistributedSampler with set_epoch, track_ids",
    ),
}

# (program, fault class, extra flags, expected path prefix, expected step, form, note)
FAULTS: list[tuple[str, str, tuple[str, ...], str, int | None, str, str]] = [
    # scheduler
    (
        "mlp_adamw_cosine",
        "scheduler",
        ("--fault", "no_scheduler"),
        "scheduler",
        AFTER_LOAD,
        "deterministic",
        "LambdaLR state not loaded",
    ),
    (
        "cnn_bn_sgd_multistep",
        "scheduler",
        ("--fault", "no_scheduler"),
        "scheduler",
        AFTER_LOAD,
        "nondeterministic",
        "MultiStepLR state not loaded",
    ),
    (
        "cnn_bn_sgd_onecycle",
        "scheduler",
        ("--fault", "no_scheduler"),
        "scheduler",
        AFTER_LOAD,
        "deterministic",
        "OneCycleLR state not loaded",
    ),
    (
        "mlp_sgd_plateau",
        "scheduler",
        ("--fault", "no_scheduler"),
        "scheduler",
        AFTER_LOAD,
        "nondeterministic",
        "ReduceLROnPlateau state not loaded",
    ),
    # rng
    (
        "mlp_adamw_cosine",
        "rng",
        ("--fault", "no_torch_rng"),
        "rng.torch",
        AFTER_LOAD,
        "nondeterministic",
        "torch RNG (dropout) not restored",
    ),
    (
        "transformer_adamw_accum_clip",
        "rng",
        ("--fault", "no_torch_rng"),
        "rng.torch",
        AFTER_LOAD,
        "deterministic",
        "torch RNG (dropout) not restored",
    ),
    (
        "cnn_bn_sgd_multistep",
        "rng",
        ("--fault", "no_torch_rng"),
        "rng.torch",
        AFTER_LOAD,
        "deterministic",
        "torch RNG (dropout) not restored",
    ),
    # data position
    (
        "mlp_adamw_cosine",
        "data_position",
        ("--fault", "no_skip"),
        "model",
        FIRST_RESUMED,
        "deterministic",
        "the resumed epoch restarts at its first batch",
    ),
    (
        "mlp_random_sampler",
        "data_position",
        ("--fault", "skip_off_by_one"),
        "model",
        FIRST_RESUMED,
        "nondeterministic",
        "one batch too many skipped",
    ),
    (
        "cnn_weighted_sampler",
        "data_position",
        ("--fault", "no_generator"),
        "data.generator_at_epoch_start",
        FIRST_RESUMED,
        "deterministic",
        "the sampler's generator not restored",
    ),
    (
        "cnn_stateful_loader",
        "data_position",
        ("--fault", "no_loader_state"),
        "data.loader",
        AFTER_LOAD,
        "deterministic",
        "StatefulDataLoader state not loaded",
    ),
    (
        "mlp_stateful_workers2",
        "data_position",
        ("--fault", "no_loader_state"),
        "data.loader",
        AFTER_LOAD,
        "nondeterministic",
        "StatefulDataLoader (2 workers) state not loaded",
    ),
    # optimizer moments
    (
        "mlp_adamw_cosine",
        "optimizer_moments",
        ("--fault", "no_optimizer"),
        "optimizer",
        AFTER_LOAD,
        "deterministic",
        "AdamW state (moments) not loaded",
    ),
    (
        "cnn_bn_sgd_multistep",
        "optimizer_moments",
        ("--fault", "no_optimizer"),
        "optimizer",
        AFTER_LOAD,
        "deterministic",
        "SGD momentum buffers not loaded",
    ),
    (
        "mlp_adafactor_cosine",
        "optimizer_moments",
        ("--fault", "no_optimizer"),
        "optimizer",
        AFTER_LOAD,
        "nondeterministic",
        "Adafactor's factored moments not loaded",
    ),
    (
        "transformer_lion_multistep",
        "optimizer_moments",
        ("--fault", "no_optimizer"),
        "optimizer",
        AFTER_LOAD,
        "deterministic",
        "Lion's momentum not loaded",
    ),
    (
        "tiny_sgd_multistep",
        "optimizer_moments",
        ("--fault", "no_optimizer"),
        "optimizer",
        AFTER_LOAD,
        "nondeterministic",
        "1-element momentum buffers not loaded",
    ),
    # grad scaler
    (
        "cnn_fp16_gradscaler",
        "grad_scaler",
        ("--fault", "no_scaler"),
        "scaler",
        AFTER_LOAD,
        "deterministic",
        "GradScaler state not loaded",
    ),
    (
        "mlp_fp16_gradscaler_accum",
        "grad_scaler",
        ("--fault", "no_scaler"),
        "scaler",
        AFTER_LOAD,
        "nondeterministic",
        "GradScaler state not loaded",
    ),
    # EMA counter
    (
        "mlp_ema_autoresume",
        "ema_counter",
        ("--fault", "ema_counter_reset"),
        "ema.num_updates",
        AFTER_LOAD,
        "deterministic",
        "EMA weights loaded, its update counter reset",
    ),
    (
        "transformer_onecycle_ema",
        "ema_counter",
        ("--fault", "ema_counter_reset"),
        "ema.num_updates",
        AFTER_LOAD,
        "nondeterministic",
        "EMA update counter reset",
    ),
    # _orig_mod. keys loaded with strict=False
    (
        "mlp_compile",
        "orig_mod_keys",
        ("--fault", "orig_mod_strict_false"),
        "model",
        AFTER_LOAD,
        "deterministic",
        "compiled state_dict loaded into the plain model with strict=False",
    ),
    (
        "mlp_compile",
        "orig_mod_keys",
        ("--fault", "orig_mod_strict_false"),
        "model",
        AFTER_LOAD,
        "nondeterministic",
        "compiled state_dict loaded into the plain model with strict=False",
    ),
    # sampler epoch
    (
        "mlp_distributed_sampler",
        "sampler_epoch",
        ("--fault", "no_set_epoch"),
        "model",
        FIRST_RESUMED,
        "deterministic",
        "resumed run never calls sampler.set_epoch",
    ),
    # worker RNG
    (
        "mlp_stateful_workers2",
        "worker_rng",
        ("--augment", "worker_rng"),
        "model",
        SECOND_RESUMED,
        "deterministic",
        "augmentation from the workers' RNG, restarted by the restored loader",
    ),
    (
        "cnn_stateful_loader",
        "worker_rng",
        ("--workers", "2", "--augment", "worker_rng"),
        "model",
        SECOND_RESUMED,
        "nondeterministic",
        "2 workers, augmentation from their RNG, restarted by the restored loader",
    ),
]

COVERAGE_FAULTS: list[tuple[str, str, tuple[str, ...], str, int | None, str, str]] = [
    (
        "mlp_track_ids",
        "data_position",
        ("--fault", "no_skip"),
        "coverage.epoch1.rank0",
        FIRST_RESUMED,
        "deterministic",
        "the resumed epoch restarts: IDs consumed again",
    ),
    (
        "cnn_stateful_track_ids",
        "data_position",
        ("--fault", "no_loader_state"),
        "data.loader",  # the observed loader state differs first, before any ID is consumed
        AFTER_LOAD,
        "deterministic",
        "StatefulDataLoader state not loaded: IDs consumed again",
    ),
    (
        "mlp_distributed_track_ids",
        "sampler_epoch",
        ("--fault", "no_set_epoch"),
        "coverage.epoch1.rank0",
        FIRST_RESUMED,
        "deterministic",
        "resumed run never calls set_epoch: epoch 1 in epoch 0's order",
    ),
]


def command_case(name: str, flags: Sequence[str], total_step: int = TOTAL_STEP):
    from trainparity import CommandCase

    auto = "--auto-resume" in flags
    return CommandCase(
        template=[
            "python",
            SCRIPT,
            "--checkpoint",
            "{checkpoint}",
            "--end-step",
            "{end_step}",
            "--resume",
            "{resume_from?}",
            *flags,
        ],
        checkpoint="{run_dir}/checkpoints" if auto else "{run_dir}/checkpoint.pt",
        split_step=SPLIT_STEP,
        total_step=total_step,
        observe=OBSERVE,
        name=name,
    )


def comparison_for(form: str):
    from trainparity import ExactComparison, NoiseComparison

    return NoiseComparison() if form == "nondeterministic" else ExactComparison()


def form_flags(form: str) -> tuple[str, ...]:
    return ("--noisy",) if form == "nondeterministic" else ()


def run_resume(name: str, flags: Sequence[str], form: str, work: Path) -> Any:
    from trainparity import check_resume

    return check_resume(
        command_case(name, (*flags, *form_flags(form))),
        comparison=comparison_for(form),
        cwd=ROOT,
        work_dir=work,
        environment=ENVIRONMENT,
        timeout=600.0,
    )


@dataclass(frozen=True)
class ChainCoverage:
    """A sample coverage audit of one epoch over the resume's phases, in the shape of a result."""

    outcome: str
    message: str
    primary_difference: Any
    first_divergent_step: int | None = None


def run_chain_coverage(name: str, flags: Sequence[str], form: str, work: Path) -> Any:
    """check_resume to step 8 (epoch 1 = steps 5..8, split after its first batch), then
    `audit_recorded_chain` of epoch 1 over candidate_split and candidate_resume: ExactlyOnce."""
    from trainparity import ExactlyOnce, check_resume
    from trainparity.sample_coverage import audit_recorded_chain

    case = command_case(name, (*flags, *form_flags(form)), total_step=COVERAGE_TOTAL_STEP)
    check = check_resume(
        case,
        comparison=comparison_for(form),
        cwd=ROOT,
        work_dir=work,
        environment=ENVIRONMENT,
        timeout=600.0,
    )
    if check.outcome.value == "ERROR":
        return check
    phases = [work / phase / "ids" for phase in ("candidate_split", "candidate_resume")]
    audit = audit_recorded_chain(phases, policy=ExactlyOnce(range(SAMPLES)), epochs=[1])[1]
    return ChainCoverage(
        outcome=audit.outcome.value if hasattr(audit.outcome, "value") else str(audit.outcome),
        message=audit.message,
        primary_difference=audit.first_violation,
    )


def run_explain(name: str, flags: Sequence[str], form: str, work: Path) -> Any:
    """The resume check, then `explain` on its verdict (the check is expected to FAIL)."""
    from trainparity import explain

    result = run_resume(name, flags, form, work / "check")
    case = command_case(name, (*flags, *form_flags(form)))
    return explain(result, case=case, cwd=ROOT, environment=ENVIRONMENT, timeout=600.0)


def run_runs(
    name: str, variants: dict[str, Sequence[str]], form: str, tolerance: bool, work: Path
) -> Any:
    from trainparity import ToleranceComparison, check_runs

    flags = form_flags(form)
    comparison = ToleranceComparison(rtol=1e-4, atol=1e-6) if tolerance else comparison_for(form)
    case = command_case(name, ())
    return check_runs(
        case,
        {key: {"args": [*args, *flags]} for key, args in variants.items()},
        comparison=comparison,
        cwd=ROOT,
        work_dir=work,
        environment=ENVIRONMENT,
        timeout=600.0,
    )


def run_accumulation(case: str, form: str, work: Path) -> Any:
    from trainparity import AccumulationExecutionPlan, NoiseComparison, check_accumulation

    # docs/accumulation.md ("Loops with AdamW, clipping and dropout"): a real loop is judged
    # with NoiseComparison(), whose split reference measures the rounding a split brings; on a
    # deterministic program it is exact wherever nothing differs.
    comparison = NoiseComparison()
    prefix = "Noisy" if form == "nondeterministic" else ""
    return check_accumulation(
        f"{ACCUMULATION}:{prefix}{case}",
        candidate=AccumulationExecutionPlan(2, clip_grad_norm=0.5),
        comparison=comparison,
        cwd=ROOT,
        work_dir=work,
        environment=ENVIRONMENT,
        timeout=600.0,
    )


def _entries() -> list[Entry]:
    entries: list[Entry] = []
    fast = {
        ("mlp_adamw_cosine", "deterministic", None),
        ("mlp_adamw_cosine", "nondeterministic", None),
        ("mlp_adamw_cosine", "deterministic", "no_scheduler"),
        ("mlp_adamw_cosine", "nondeterministic", "no_torch_rng"),
    }
    for name, (flags, note) in PROGRAMS.items():
        for form in ("deterministic", "nondeterministic"):
            entries.append(
                Entry(
                    program=name,
                    form=form,
                    check="resume",
                    run=functools.partial(run_resume, name, flags, form),
                    fast=(name, form, None) in fast,
                    note=note,
                )
            )
    for name, (flags, note) in COVERAGE_PROGRAMS.items():
        for form in ("deterministic", "nondeterministic"):
            entries.append(
                Entry(
                    name,
                    form,
                    "coverage",
                    functools.partial(run_resume, name, flags, form),
                    note=note,
                )
            )
    programs = {**PROGRAMS, **COVERAGE_PROGRAMS}
    for table, check in ((FAULTS, "resume"), (COVERAGE_FAULTS, "coverage")):
        for name, fault, extra, path, step, form, note in table:
            flags = (*programs[name][0], *extra)
            entries.append(
                Entry(
                    program=name,
                    form=form,
                    check=check,
                    run=functools.partial(run_resume, name, flags, form),
                    fault=fault,
                    expect_path=path,
                    expect_step=step,
                    fast=(name, form, extra[-1]) in fast,
                    note=note,
                )
            )
    # sample coverage: epoch 1's IDs over the resume's two phases, each exactly once.
    for name, extra, fault, note in (
        ("mlp_track_ids", (), None, "epoch 1 audited ExactlyOnce over the split and the resume"),
        (
            "mlp_track_ids",
            ("--fault", "no_skip"),
            "data_position",
            "the resumed epoch restarts: its first batch twice, its last never",
        ),
    ):
        flags = (*COVERAGE_PROGRAMS[name][0], *extra)
        entries.append(
            Entry(
                name.replace("track_ids", "chain_audit"),
                "deterministic",
                "coverage",
                functools.partial(run_chain_coverage, name, flags, "deterministic"),
                fault=fault,
                expect_path=None if fault is None else "coverage",
                note=note,
            )
        )
    # explain: an explanation is right when it names the planted cause's component.
    for name, fault, extra, component, note in (
        (
            "mlp_adamw_cosine",
            "rng",
            ("--fault", "no_torch_rng"),
            "generator",
            "torch RNG not restored: the explanation must name the generator",
        ),
        (
            "cnn_bn_sgd_multistep",
            "scheduler",
            ("--fault", "no_scheduler"),
            "scheduler",
            "MultiStepLR not restored: the explanation must name the scheduler",
        ),
    ):
        flags = (*PROGRAMS[name][0], *extra)
        entries.append(
            Entry(
                name,
                "deterministic",
                "explain",
                functools.partial(run_explain, name, flags, "deterministic"),
                fault=fault,
                expect_path=component,
                note=note,
            )
        )
    # check_runs: configurations that must end in the same state.
    workers = {"workers0": ("--workers", "0"), "workers2": ("--workers", "2")}
    augment = ("--model", "cnn", "--optimizer", "sgd", "--augment", "per_sample")
    accumulation = ("--optimizer", "sgd", "--scheduler", "multistep", "--dropout", "0")
    accumulated = {
        "batch8": (*accumulation, "--batch", "8"),
        "accum2x4": (*accumulation, "--accum", "2"),
    }
    not_divided = {
        **accumulated,
        "accum2x4": (*accumulated["accum2x4"], "--fault", "no_loss_division"),
    }
    for form in ("deterministic", "nondeterministic"):
        entries.append(
            Entry(
                "cnn_workers0_vs_2",
                form,
                "runs",
                functools.partial(
                    run_runs,
                    "cnn_workers0_vs_2",
                    {k: (*augment, *v) for k, v in workers.items()},
                    form,
                    False,
                ),
                note="num_workers 0 against 2, per-sample augmentation: the same batches",
            )
        )
    entries.append(
        Entry(
            "mlp_accum2x4_vs_batch8",
            "deterministic",
            "runs",
            functools.partial(
                run_runs, "mlp_accum2x4_vs_batch8", accumulated, "deterministic", True
            ),
            note="2 microbatches of 4 against batches of 8, SGD, under a declared tolerance",
        )
    )
    entries.append(
        Entry(
            "mlp_accum2x4_vs_batch8",
            "deterministic",
            "runs",
            functools.partial(
                run_runs, "mlp_accum2x4_vs_batch8", not_divided, "deterministic", True
            ),
            fault="loss_normalisation",
            expect_path="model",
            expect_step=1,
            note="the accumulated variant does not divide its loss by 2",
        )
    )
    # check_accumulation: one update of the user's own loop against the full batch.
    for case, note in (
        ("TransformerAdamWClip", "transformer, AdamW, SequentialLR, clip, 2 microbatches"),
        ("MlpSgdMultiStep", "MLP, SGD momentum, MultiStepLR, clip, 2 microbatches"),
        ("MlpScalerClip", "MLP, fp16 autocast, GradScaler: unscale then clip"),
    ):
        for form in ("deterministic", "nondeterministic"):
            entries.append(
                Entry(
                    case,
                    form,
                    "accumulation",
                    functools.partial(run_accumulation, case, form),
                    note=note,
                )
            )
    for case, fault, path, form, note in (
        (
            "TransformerLossNotDivided",
            "loss_normalisation",
            "loss_accounting",
            "deterministic",
            "each microbatch's mean loss not divided by the count",
        ),
        (
            "MlpLossNotDivided",
            "loss_normalisation",
            "loss_accounting",
            "nondeterministic",
            "each microbatch's mean loss not divided by the count",
        ),
        (
            "MlpClipBeforeUnscale",
            "clipping_order",
            "clipping",
            "deterministic",
            "clips the gradients while they are still scaled",
        ),
        (
            "MlpClipAfterStep",
            "clipping_order",
            "clipping",
            "nondeterministic",
            "clips after the optimizer stepped",
        ),
    ):
        entries.append(
            Entry(
                case,
                form,
                "accumulation",
                functools.partial(run_accumulation, case, form),
                fault=fault,
                expect_path=path,
                note=note,
            )
        )
    return entries


ENTRIES: list[Entry] = _entries()

if __name__ == "__main__":  # pragma: no cover - a quick listing
    for entry in ENTRIES:
        print(entry.program, entry.form, entry.check, entry.fault, file=sys.stdout)
