"""What NoiseComparison costs: judging a recording against an envelope, and a whole check.

    python benchmarks/bench_noise.py [--repeats 5] [--elements 8388608] [--skip-check] [--json PATH]

1. Judging cost. Three recordings ("runs") of one training-state trajectory
   (a model + Adam state of `--elements` float32 elements per step, over
   `--steps` steps) whose floating-point values differ slightly from run to
   run, as nondeterministic training leaves them. The time to judge run c
   against the envelope of runs a and b at every step,
   judge_step(NoiseComparison(), [a, b], c), against the exact comparison of
   two recordings at every step, compare_records(ExactComparison(), a, c).
   The files are in the page cache (each is read once before timing) and are
   read once, outside the timed repetitions, in both arms (`--fresh-read`
   reads them again with read_recordings inside every repetition: judging
   reads a, b and c, the exact arm a and c; digests verified in both).
   Target: judging / exact ≤ 1.5.
2. Check cost. check_resume of tests.fixtures.noisy_training:NoisyCase with
   NoiseComparison(baselines=3) against baselines=2, both parallel=True,
   alternated, `--check-repeats` each. Target ≤ 1.35 where the phases run
   concurrently on enough cores; on fewer cores the extra baseline competes
   with the other phases for them, and the ratio is expected to exceed it.

Medians of one process, both arms of each ratio measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import trainparity
from timing import median_seconds
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.noise.envelope import judge_step
from trainparity._internal.recording import recording_to
from trainparity._internal.recording.reader import Recording, read_recordings
from trainparity._internal.recording.trajectory import compare_records

REPOSITORY = Path(__file__).resolve().parent.parent
NOISY_CASE = "tests.fixtures.noisy_training:NoisyCase"
JUDGE_TARGET = 1.5
CHECK_TARGET = 1.35
WIDTH = 1024  # columns of every weight matrix
RUN_NOISE = 1e-6  # relative spread between runs, per step (float32 noise grows over steps)


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def base_state(elements: int, layers: int) -> dict[str, torch.Tensor]:
    """Parameters of `layers` linear layers: a third of `elements` (Adam holds the other two)."""
    generator = torch.Generator().manual_seed(0)
    rows = max(1, elements // 3 // layers // WIDTH - 1)
    parameters = {}
    for layer in range(layers):
        parameters[f"layer{layer}.weight"] = torch.randn(rows, WIDTH, generator=generator) * 0.02
        parameters[f"layer{layer}.bias"] = torch.randn(WIDTH, generator=generator) * 0.02
    return parameters


def training_state(
    parameters: dict[str, torch.Tensor], noise: dict[str, torch.Tensor], step: int
) -> dict[str, object]:
    """One run's state after `step`: a model state_dict and an Adam state_dict, values moved by
    the run's noise (same shapes, same non-float fields in every run)."""
    drift = 1.0 + 1e-3 * step
    spread = RUN_NOISE * (step + 1)
    model = {name: value * drift + noise[name] * spread for name, value in parameters.items()}
    optimizer_state = {}
    for index, (name, value) in enumerate(model.items()):
        optimizer_state[index] = {
            "step": torch.tensor(float(step)),
            "exp_avg": value * 0.1 + noise[name] * (spread * 0.5),
            "exp_avg_sq": value * value + noise[name].abs() * (spread * 1e-3),
        }
    return {
        "model": model,
        "optimizer": {
            "state": optimizer_state,
            "param_groups": [
                {
                    "lr": 1e-3 * drift,
                    "betas": (0.9, 0.999),
                    "eps": 1e-8,
                    "weight_decay": 0.0,
                    "params": list(range(len(model))),
                }
            ],
        },
        "step": step,
    }


def write_recordings(work: Path, elements: int, layers: int, steps: int) -> tuple[list[Path], int]:
    """Three full-mode recordings of the same trajectory, each with its own run-to-run noise.

    Returns their directories and the float32 elements of one step's state.
    """
    parameters = base_state(elements, layers)
    directories = []
    for run in range(3):
        generator = torch.Generator().manual_seed(100 + run)
        noise = {
            name: torch.randn(value.shape, generator=generator)
            for name, value in parameters.items()
        }
        directory = work / f"run{run}"
        with recording_to(directory, mode="full"):
            for step in range(steps + 1):
                trainparity.record(step, training_state(parameters, noise, step))
        directories.append(directory)
    return directories, 3 * sum(value.numel() for value in parameters.values())


def read_runs(directories: list[Path]) -> list[Recording]:
    return [read_recordings(directory)[0] for directory in directories]


def judge_all(runs: list[Recording]) -> int:
    a, b, c = runs
    policy = NoiseComparison()
    measured = 0
    for first, second, candidate in zip(a.steps, b.steps, c.steps, strict=True):
        found = judge_step(policy, [first.snapshot(), second.snapshot()], candidate.snapshot())
        measured += len(found.paths)
    return measured


def compare_all(runs: list[Recording]) -> int:
    a, c = runs
    exact = ExactComparison()
    return sum(
        len(compare_records(exact, first, candidate).differences)
        for first, candidate in zip(a.steps, c.steps, strict=True)
    )


def bench_judging(arguments: argparse.Namespace, work: Path) -> dict[str, object]:
    directories, elements = write_recordings(
        work, arguments.elements, arguments.layers, arguments.steps
    )
    runs = read_runs(directories)  # reads every byte once: the files are in the page cache
    judged = judge_all(runs)
    differing = compare_all([runs[0], runs[2]])
    assert judged > 0 and differing > 0, (judged, differing)  # both arms did real work
    a_and_c = [directories[0], directories[2]]  # the exact arm reads only what it compares
    if arguments.fresh_read:
        judge_seconds = median_seconds(lambda: judge_all(read_runs(directories)), arguments.repeats)
        exact_seconds = median_seconds(lambda: compare_all(read_runs(a_and_c)), arguments.repeats)
    else:
        judge_seconds = median_seconds(lambda: judge_all(runs), arguments.repeats)
        exact_seconds = median_seconds(lambda: compare_all([runs[0], runs[2]]), arguments.repeats)
    state_mib = elements * 4 / 2**20
    tensors = len(runs[0].steps[0].summaries)
    ratio = judge_seconds / exact_seconds
    reading = (
        "read with read_recordings inside every repetition (judging a, b, c; exact a, c)"
        if arguments.fresh_read
        else "read once before timing (both arms); files in the page cache"
    )
    print(
        f"1. judging cost: 3 full recordings of {len(runs[0].steps)} steps, {elements} float32 "
        f"elements ({state_mib:.1f} MiB) per step in {tensors} tensors; recordings {reading}"
    )
    print(
        f"   judge_step(NoiseComparison(), [a, b], c), every step: "
        f"{judge_seconds * 1e3:8.1f} ms  ({judged} paths measured)"
    )
    print(
        f"   compare_records(ExactComparison(), a, c), every step: "
        f"{exact_seconds * 1e3:8.1f} ms  ({differing} differences)"
    )
    print(
        f"   judging / exact: {ratio:.2f}  (target ≤ {JUDGE_TARGET}: "
        f"{'met' if ratio <= JUDGE_TARGET else 'MISSED'}; judging reads 3 buffers per path, "
        f"exact 2)"
    )
    return {
        "steps": len(runs[0].steps),
        "elements": elements,
        "tensors_per_step": tensors,
        "fresh_read": arguments.fresh_read,
        "judge_seconds": judge_seconds,
        "exact_seconds": exact_seconds,
        "ratio": ratio,
        "target": JUDGE_TARGET,
        "met": ratio <= JUDGE_TARGET,
    }


def check_seconds(baselines: int, work: Path) -> tuple[float, str]:
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    result = trainparity.check_resume(
        NOISY_CASE,
        comparison=NoiseComparison(baselines=baselines),
        cwd=REPOSITORY,
        temporary_root=work,
        parallel=True,
    )
    seconds = time.perf_counter() - began
    outcome = str(result.outcome.value)
    if outcome == "ERROR":  # a check that did not run its phases times nothing
        raise SystemExit(f"check_resume with baselines={baselines} failed: {result.message}")
    return seconds, outcome


def bench_check(arguments: argparse.Namespace, work: Path) -> dict[str, object]:
    if str(REPOSITORY) not in sys.path:  # the case is imported here too, as tests.fixtures...
        sys.path.insert(0, str(REPOSITORY))
    cores = usable_cores()
    times: dict[int, list[float]] = {2: [], 3: []}
    outcomes: dict[int, set[str]] = {2: set(), 3: set()}
    check_seconds(2, work)  # warm-up: imports, page cache
    for _ in range(arguments.check_repeats):
        for baselines in (2, 3):  # alternated, so a busy spell on the machine hits both
            seconds, outcome = check_seconds(baselines, work)
            times[baselines].append(seconds)
            outcomes[baselines].add(outcome)
    two, three = statistics.median(times[2]), statistics.median(times[3])
    ratio = three / two
    concurrent = 3 + 1  # the children started at once: the baselines and candidate_split
    print(
        f"2. check cost: check_resume({NOISY_CASE}, parallel=True), median of "
        f"{arguments.check_repeats}, alternated; {cores} usable cores "
        f"(os.cpu_count() {os.cpu_count()})"
    )
    print(
        f"   NoiseComparison(baselines=2): {two:6.1f} s  outcome {', '.join(sorted(outcomes[2]))}"
    )
    print(
        f"   NoiseComparison(baselines=3): {three:6.1f} s  outcome {', '.join(sorted(outcomes[3]))}"
    )
    verdict = "met" if ratio <= CHECK_TARGET else "MISSED"
    print(
        f"   baselines=3 / baselines=2: {ratio:.2f}  (target ≤ {CHECK_TARGET} when the phases run "
        f"concurrently on enough cores: {verdict})"
    )
    if cores < concurrent:
        print(
            f"   note: {cores} cores for the {concurrent} phases baselines=3 starts at once (3 "
            f"baselines + candidate_split): the extra baseline competes with the others for "
            f"the cores, so here the ratio is expected to exceed the target (measured {ratio:.2f})"
        )
    return {
        "cores": cores,
        "cpu_count": os.cpu_count(),
        "repeats": arguments.check_repeats,
        "baselines2_seconds": two,
        "baselines3_seconds": three,
        "baselines2_all": times[2],
        "baselines3_all": times[3],
        "outcomes": {str(k): sorted(v) for k, v in outcomes.items()},
        "ratio": ratio,
        "target": CHECK_TARGET,
        "met": ratio <= CHECK_TARGET,
        "enough_cores": cores >= concurrent,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per judging figure")
    parser.add_argument(
        "--elements",
        type=int,
        default=8 << 20,
        help="float32 elements of the state per step, model + Adam (default 8 Mi = 32 MiB)",
    )
    parser.add_argument("--steps", type=int, default=4, help="recorded steps after step 0")
    parser.add_argument("--layers", type=int, default=8, help="linear layers of the model")
    parser.add_argument(
        "--fresh-read",
        action="store_true",
        help="read the recordings inside every timed repetition (both arms)",
    )
    parser.add_argument("--skip-check", action="store_true", help="only the judging part")
    parser.add_argument("--check-repeats", type=int, default=3, help="checks per arm")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    arguments = parser.parse_args()
    print(
        f"trainparity {trainparity.__version__}, torch {torch.__version__}, "
        f"{usable_cores()} usable cores; medians, both arms of a ratio in this run"
    )
    report: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="bench-noise-") as work_text:
        work = Path(work_text)
        report["judging"] = bench_judging(arguments, work / "judging")
        if not arguments.skip_check:
            report["check"] = bench_check(arguments, work / "checks")
    if arguments.json is not None:
        arguments.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
