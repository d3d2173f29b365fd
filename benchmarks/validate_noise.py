"""The noise envelope's tables on real nondeterministic CPU training (docs/validation.md).

tests/fixtures/noisy_training.py sums its per-sample gradients in an order
drawn from os.urandom, as GPU atomics do. This script prints, as Markdown:

1. drift: how far two repeats of the script part, step by step, over 40 steps;
2. false positives: `--clean` clean check_resume and `--clean` clean check_runs
   (noise pair ref/ref_repeat, a third variant judged) at the default factor,
   their outcomes and the largest excursion/noise ratio seen;
3. detection: every fault of the resume fault table rebuilt on the script,
   its verdict, step, first path and, for an envelope exit, its ratio;
4. the smallest fault seen: resumes that restore the weights times (1 + δ),
   δ from 1e-7 up, the first δ that fails and its excursion in units of the noise.

Run from the repository root: `python benchmarks/validate_noise.py` (about
15 minutes on 2 cores; `--clean 5` for a quick look).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import trainparity  # noqa: E402
from trainparity import NoiseComparison, Outcome  # noqa: E402
from trainparity._internal.noise.envelope import judge_step  # noqa: E402
from trainparity._internal.recording.reader import read_recordings  # noqa: E402

from tests.fixtures import noisy_training  # noqa: E402

CASES = "tests.fixtures.noisy_training"


def drift_table(steps: int) -> list[str]:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        processes = [
            subprocess.Popen(
                [sys.executable, "-m", CASES, "--run-dir", str(root / f"run{index}"),
                 "--end-step", str(steps), "--record"],
                cwd=ROOT,
                env={**os.environ, "TRAINPARITY_RECORD": str(root / f"rec{index}")},
            )
            for index in range(2)
        ]  # fmt: skip
        for process in processes:
            if process.wait() != 0:
                raise SystemExit("the noisy script failed")
        first, second = (read_recordings(root / f"rec{index}")[0].steps for index in range(2))
        lines = ["| step | model (relative L2) | optimizer (relative L2) |", "|---|---|---|"]
        for index in (1, 2, 5, 10, 20, 30, 40):
            if index >= len(first):
                break
            judged = judge_step(
                NoiseComparison(), [first[index].snapshot(), second[index].snapshot()]
            )
            largest: dict[str, float] = {}
            for entry in judged.paths:
                component = entry.path.split(".")[0].split("[")[0]
                largest[component] = max(largest.get(component, 0.0), entry.noise)
            lines.append(
                f"| {first[index].step} | {largest.get('model', 0):.2e} | "
                f"{largest.get('optimizer', 0):.2e} |"
            )
        return lines


def resume(case: str, **options) -> trainparity.api.ProcessResumeResult:
    with tempfile.TemporaryDirectory() as directory:
        return trainparity.check_resume(
            f"{CASES}:{case}",
            cwd=ROOT,
            temporary_root=Path(directory),
            comparison=options.pop("comparison", NoiseComparison()),
            start="warm",
            **options,
        )


def runs() -> trainparity.api.RunsResult:
    with tempfile.TemporaryDirectory() as directory:
        return trainparity.check_runs(
            f"{CASES}:NoisyRuns",
            {"ref": {}, "ref_repeat": {}, "same": {}},
            comparison=NoiseComparison(),
            noise=("ref", "ref_repeat"),
            cwd=ROOT,
            temporary_root=Path(directory),
            start="warm",
        )


def ratio_of(result) -> float:
    closest = (result.noise_envelope or {}).get("closest_approach")
    return closest["ratio"] if closest else 0.0


def false_positive_lines(count: int, checks: list[str]) -> list[str]:
    lines = ["| check | runs | PASS | FAIL | ABSTAIN/ERROR | largest ratio | median ratio |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, run in (("check_resume", lambda: resume("NoisyCase")), ("check_runs", runs)):
        if label not in checks:
            continue
        outcomes: list[Outcome] = []
        ratios: list[float] = []
        for index in range(count):
            result = run()
            outcomes.append(result.outcome)
            ratios.append(ratio_of(result))
            print(f"  {label} {index + 1}/{count}: {result.outcome.value} {result.message}",
                  file=sys.stderr, flush=True)  # fmt: skip
        ratios.sort()
        other = sum(outcome not in (Outcome.PASS, Outcome.FAIL) for outcome in outcomes)
        lines.append(
            f"| {label} | {count} | {outcomes.count(Outcome.PASS)} | "
            f"{outcomes.count(Outcome.FAIL)} | {other} | {max(ratios):.2f} | "
            f"{ratios[len(ratios) // 2]:.2f} |"
        )
    return lines


def detection_lines() -> list[str]:
    lines = ["| fault | verdict | step | first path | excursion / noise |", "|---|---|---|---|---|"]
    for fault, case in noisy_training.FAULT_CASES.items():
        result = resume(case)
        path = result.primary_difference.path if result.primary_difference else "-"
        reason = result.primary_difference.reason if result.primary_difference else ""
        ratio = "exact path" if reason != "noise_envelope" else _exit_ratio(result)
        lines.append(
            f"| {fault} | {result.outcome.value} | {result.first_divergent_step} | `{path}` | {ratio} |"
        )
        print(f"  {fault}: {result.message}", file=sys.stderr, flush=True)
    return lines


def _exit_ratio(result) -> str:
    for row in result.noise_envelope["steps"]:
        worst = row.get("largest_ratio")
        if row["step"] == result.first_divergent_step and worst and row["candidate"]:
            return f"{worst['ratio']:.3g}"
    return "?"


def sweep_lines() -> list[str]:
    lines = ["| δ (weights × (1 + δ) on restore) | verdict | first path | excursion / noise |",
             "|---|---|---|---|"]  # fmt: skip
    for delta in noisy_training.LOSSY_DELTAS:
        result = resume(noisy_training.LOSSY_CASES[delta])
        path = result.primary_difference.path if result.primary_difference else "-"
        ratio = _exit_ratio(result) if result.outcome is Outcome.FAIL else f"{ratio_of(result):.3g}"
        lines.append(f"| {delta:.0e} | {result.outcome.value} | `{path}` | {ratio} |")
        print(f"  lossy {delta:.0e}: {result.message}", file=sys.stderr, flush=True)
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clean", type=int, default=30, help="clean checks of each kind")
    parser.add_argument("--drift-steps", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the tables as JSON")
    parser.add_argument(
        "--tables",
        default="drift,false_positives,detection,smallest_fault",
        help="which tables, comma-separated (default: all four)",
    )
    parser.add_argument(
        "--checks",
        default="check_resume,check_runs",
        help="for false_positives: which checks, comma-separated",
    )
    arguments = parser.parse_args()
    began = time.perf_counter()
    builders = {
        "drift": lambda: drift_table(arguments.drift_steps),
        "false_positives": lambda: false_positive_lines(
            arguments.clean, arguments.checks.split(",")
        ),
        "detection": detection_lines,
        "smallest_fault": sweep_lines,
    }
    tables = {name: builders[name]() for name in arguments.tables.split(",")}
    for title, lines in tables.items():
        print(f"\n### {title}\n")
        print("\n".join(lines))
    print(f"\n(cores: {os.cpu_count()}, wall {time.perf_counter() - began:.0f} s)")
    if arguments.json:
        arguments.json.write_text(json.dumps(tables, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
