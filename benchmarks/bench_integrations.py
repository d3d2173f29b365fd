"""What the library integrations cost: the HF callback per Trainer step, and check_runs over bare runs.

Run: `python benchmarks/bench_integrations.py [--repeats 3]` (needs the
`huggingface` extra). Every figure is a median over `--repeats` rounds, and
every ratio compares two things measured in the same round:

1. callback overhead, trajectories off: a Trainer on a tiny GPT-2 runs
   `--steps` steps without and with TrainParityCallback, in ABBA order in
   one process; `end_to_end_overhead` is the median over rounds of
   with/without - 1. The callback's per-step hook (`on_step_end`, the one
   that runs every step) is also timed directly: `hook_share_of_step` is its
   time over the median plain step, a figure machine load does not blur.
2. check_runs of two HF variants (accumulation 4x2 vs 1x8): its wall time
   against (a) the same four runs (each variant twice) started at once
   without trainparity, and (b) the longer variant run twice at once.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "docs" / "examples" / "integrations"
CHILD_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}


def _tiny_trainer(steps: int, callbacks: list, output_dir: str):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
    rows = [
        {"input_ids": torch.randint(1, 64, (12,)), "labels": torch.randint(1, 64, (12,))}
        for _ in range(64)
    ]
    arguments = TrainingArguments(
        output_dir=output_dir,
        max_steps=steps,
        per_device_train_batch_size=4,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    return Trainer(
        model=GPT2LMHeadModel(config), args=arguments, train_dataset=rows, callbacks=callbacks
    )


def callback_overhead(repeats: int, steps: int) -> dict[str, float]:
    from trainparity.integrations.huggingface import TrainParityCallback
    from transformers import TrainerControl, TrainerState
    from transformers.utils import logging

    logging.set_verbosity_error()

    def seconds_per_step(callbacks: list, scratch: str) -> float:
        trainer = _tiny_trainer(steps, callbacks, scratch)
        began = time.perf_counter()
        trainer.train()
        return (time.perf_counter() - began) / steps

    ratios, plain_steps = [], []
    with tempfile.TemporaryDirectory(prefix="bench-integrations-") as scratch:
        seconds_per_step([], scratch)  # warm-up: imports, allocator
        for _ in range(repeats):
            # ABBA within a round, so a machine slowing down (or speeding up) meanwhile
            # weighs on both sides alike.
            without = seconds_per_step([], scratch)
            with_callback = seconds_per_step([TrainParityCallback()], scratch)
            with_callback += seconds_per_step([TrainParityCallback()], scratch)
            without += seconds_per_step([], scratch)
            ratios.append(with_callback / without)
            plain_steps.append(without / 2)
        callback = TrainParityCallback()
        arguments = _tiny_trainer(1, [], scratch).args
        state, control = TrainerState(), TrainerControl()
        calls = 100_000
        began = time.perf_counter()
        for step in range(calls):
            state.global_step = step
            callback.on_step_end(arguments, state, control)
        hook_seconds = (time.perf_counter() - began) / calls
    step_seconds = statistics.median(plain_steps)
    return {
        "step_seconds_without": step_seconds,
        "end_to_end_overhead": statistics.median(ratios) - 1.0,
        "hook_seconds_per_step": hook_seconds,
        "hook_share_of_step": hook_seconds / step_seconds,
    }


def _bare_runs(case, variants: dict[str, list[str]], root: Path) -> float:
    """Start every (name, extra args) run at once, as check_runs would, without trainparity."""
    from trainparity.protocols import ProcessExecutionPlan

    environment = {**os.environ, **CHILD_ENVIRONMENT, "PYTHONPATH": str(EXAMPLE)}
    processes = []
    began = time.perf_counter()
    for name, args in variants.items():
        run_dir = root / name
        run_dir.mkdir(parents=True)
        plan = ProcessExecutionPlan(name, EXAMPLE, run_dir, case.total_step)
        processes.append(
            subprocess.Popen(
                [*case.command(plan), *args],
                cwd=EXAMPLE,
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    codes = [process.wait() for process in processes]
    elapsed = time.perf_counter() - began
    if any(codes):
        raise RuntimeError(f"a bare run failed: {codes}")
    return elapsed


def runs_overhead(repeats: int) -> dict[str, float]:
    from hf_cases import TrainerAccumulation
    from trainparity import check_runs

    case = TrainerAccumulation()
    arguments = {name: variant["args"] for name, variant in case.variants.items()}
    longer = "accum4x2"  # four microbatches per step: the slower of the two
    samples = {"check_runs": [], "four_bare": [], "longer_twice": []}
    for _ in range(repeats):
        with tempfile.TemporaryDirectory(prefix="bench-integrations-") as scratch:
            root = Path(scratch)
            began = time.perf_counter()
            result = check_runs(
                "hf_cases:TrainerAccumulation",
                cwd=EXAMPLE,
                environment=CHILD_ENVIRONMENT,
                temporary_root=root / "check",
            )
            samples["check_runs"].append(time.perf_counter() - began)
            if result.outcome not in ("PASS", "FAIL"):
                raise RuntimeError(result.message)
            four = {f"{name}_{r}": args for name, args in arguments.items() for r in "ab"}
            samples["four_bare"].append(_bare_runs(case, four, root / "four"))
            two = {f"{longer}_{r}": arguments[longer] for r in "ab"}
            samples["longer_twice"].append(_bare_runs(case, two, root / "two"))
    medians = {key: statistics.median(values) for key, values in samples.items()}
    return {
        **{f"{key}_seconds": value for key, value in medians.items()},
        "check_runs_over_four_bare_runs": medians["check_runs"] / medians["four_bare"],
        "check_runs_over_longer_variant_twice": medians["check_runs"] / medians["longer_twice"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    options = parser.parse_args()
    os.environ.update(CHILD_ENVIRONMENT)
    sys.path.insert(0, str(EXAMPLE))
    import torch

    torch.set_num_threads(1)
    print(f"cpus: {os.cpu_count()}, repeats: {options.repeats} (medians)")
    for key, value in callback_overhead(options.repeats, options.steps).items():
        print(f"callback  {key:40s} {value:.6g}")
    for key, value in runs_overhead(options.repeats).items():
        print(f"runs      {key:40s} {value:.4g}")


if __name__ == "__main__":
    main()
