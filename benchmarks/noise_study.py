"""The noise envelope's false-FAIL study: many clean nondeterministic resumes, every verdict counted.

Each check is a real `check_resume(..., comparison=NoiseComparison(baselines=k))`
of tests/fixtures/thread_hybrid_training.py, a clean script whose rounding
changes from run to run for real:

- `threads`: each process takes 1 or 2 threads in the order the phases start,
  and the loss is scaled by a 2M-element sum whose last bit depends on the
  thread count: baselines fall on one count or the other, and a candidate is
  sometimes a hybrid (split on one count, resumed on the other);
- `random`: per-sample gradients summed in an order drawn from os.urandom.

The settings are drawn from a seeded generator over the split (1 to total-1),
the total (10 or 20 steps), the hidden width (16 or 128), the outputs K (1 or
8: a 1-element bias and its momentum buffer), the baselines (2 to 5) and the
mode, so the same `--seed` runs the same settings. Every check is clean, so
every FAIL is a false FAIL. Prints one line per check and a summary as
Markdown (docs/validation.md, "The noise envelope's false-FAIL study").

Run from the repository root: `python benchmarks/noise_study.py --checks 200`
(about 25 minutes on 2 cores; `--checks 20` for a quick look).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import trainparity  # noqa: E402
from trainparity import NoiseComparison  # noqa: E402
from trainparity._internal.recording.phase_recordings import RECORDINGS_DIRECTORY  # noqa: E402
from trainparity._internal.resume.noise_recordings import ResumeEnvelope  # noqa: E402

CASES = "tests.fixtures.thread_hybrid_training"


def draw_settings(count: int, seed: int) -> list[dict[str, object]]:
    generator = random.Random(seed)
    settings = []
    for index in range(count):
        total = generator.choice((10, 20))
        settings.append(
            {
                "index": index,
                "mode": "threads" if generator.random() < 0.75 else "random",
                "total": total,
                "split": generator.randint(1, total - 1),
                "width": generator.choice((16, 128)),
                "outputs": generator.choice((1, 8)),
                "baselines": generator.choice((2, 3, 3, 4, 5)),
            }
        )
    return settings


def run_check(setting: dict[str, object], scratch: Path) -> dict[str, object]:
    counter = scratch / f"counter{setting['index']}"
    counter.mkdir()
    case = "HybridCase" if setting["total"] == 10 else "LongHybridCase"
    started = time.perf_counter()
    result = trainparity.check_resume(
        f"{CASES}:{case}",
        comparison=NoiseComparison(baselines=int(setting["baselines"])),
        split_steps=(int(setting["split"]),),
        environment={
            "HYBRID_COUNTER_DIR": str(counter),
            "HYBRID_ORDER": str(setting["mode"]),
            "HYBRID_WIDTH": str(setting["width"]),
            "HYBRID_OUTPUTS": str(setting["outputs"]),
            "OMP_NUM_THREADS": "2",
        },
        temporary_root=scratch,
        start="warm",
    )
    report = result.to_dict()
    steps = (report.get("noise_envelope") or {}).get("steps") or []
    ratios = [step["largest_ratio"]["ratio"] for step in steps if step.get("largest_ratio")]
    excursions = [
        value for step in steps for value in (step.get("excursion") or {}).values() if value
    ]
    return {
        **setting,
        "outcome": str(
            result.outcome.value if hasattr(result.outcome, "value") else result.outcome
        ),
        "bitwise": not excursions,
        "largest_ratio": max(ratios, default=0.0),
        "message": result.message,
        "seconds": round(time.perf_counter() - started, 1),
    }


# The composed study: checks assembled from a pool of real recorded runs -------------------


def _run_forked(run: dict[str, object], pool: Path) -> None:
    """One training run in a forked child: torch is imported once, in the parent."""
    from trainparity._internal.recording import recorder

    from tests.fixtures import thread_hybrid_training as script

    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.environ.update({key: str(value) for key, value in run["env"].items()})
            os.environ["TRAINPARITY_RECORD"] = str(pool / run["name"] / "recording")
            # The recorder reads its variable once, at import (in the parent, without it).
            recorder._active = recorder._UNRESOLVED
            resume = run.get("resume_from")
            script.train(pool / run["name"] / "run", int(run["end"]), resume and Path(resume))
            status = 0
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        raise SystemExit(f"training run {run['name']} failed (status {status})")


def pool_run(pool: Path, family: dict[str, object], name: str) -> str:
    """Make sure the run `name` of `family` is in `pool` (trained on first use); its name back.

    Names: full_t{threads} (uninterrupted, "threads" mode: one run per count, since each
    count is deterministic), full_r{i} ("random" mode: each a draw of its own),
    split_{t1|t2|r}_s{split} (0 to split, saved) and resume_{t12|r…}_s{split} (resumed from
    that split run's save to the end, on the thread count after "t1"/"t2").
    """
    if (pool / name / "recording").exists():
        return name
    env: dict[str, object] = {
        "HYBRID_ORDER": family["mode"],
        "HYBRID_WIDTH": family["width"],
        "HYBRID_OUTPUTS": family["outputs"],
        "HYBRID_THREADS": 1,
    }
    kind, source, split_text = (name.split("_") + [""])[:3]
    run: dict[str, object] = {"name": name, "end": family["total"], "env": env}
    if kind == "full" and source.startswith("t"):
        env["HYBRID_THREADS"] = int(source[1])
    elif kind == "split":
        run["end"] = int(split_text[1:])
        env["HYBRID_THREADS"] = int(source[1]) if source.startswith("t") else 1
    elif kind == "resume":
        saved_by = (
            f"split_{source[:2]}_{split_text}"
            if source.startswith("t")
            else (f"split_{source}_{split_text}")
        )
        pool_run(pool, family, saved_by)
        env["HYBRID_THREADS"] = int(source[2]) if source.startswith("t") else 1
        run["resume_from"] = pool / saved_by / "run" / "checkpoint.pt"
    _run_forked(run, pool)
    return name


def composed_check(pool: Path, setting: dict[str, object], scratch: Path) -> dict[str, object]:
    """Judge one check assembled from pool runs with check_resume's own envelope walk."""
    split, k = int(setting["split"]), int(setting["baselines"])
    names = [f"baseline_{chr(ord('a') + index)}" for index in range(k)]
    if setting["mode"] == "threads":
        # Thread counts alternate in the order the phases start; concurrent starts may swap.
        order = [*names, "candidate_split"]
        random.Random(int(setting["index"])).shuffle(order) if setting["swapped"] else None
        count = {name: 1 + position % 2 for position, name in enumerate(order)}
        resumed_on = 1 + len(order) % 2
        sources = {name: f"full_t{count[name]}" for name in names}
        sources["candidate_split"] = f"split_t{count['candidate_split']}_s{split}"
        sources["candidate_resume"] = f"resume_t{count['candidate_split']}{resumed_on}_s{split}"
    else:
        sources = {name: f"full_r{index}" for index, name in enumerate(names)}
        sources["candidate_split"] = f"split_r_s{split}"
        sources["candidate_resume"] = f"resume_r_s{split}"
    family = {key: setting[key] for key in ("mode", "total", "width", "outputs")}
    for source in sources.values():
        pool_run(pool, family, source)
    root = scratch / f"check{setting['index']}"
    (root / RECORDINGS_DIRECTORY).mkdir(parents=True)
    for phase, source in sources.items():
        (root / RECORDINGS_DIRECTORY / phase).symlink_to(pool / source / "recording")
    envelope = ResumeEnvelope(
        root,
        NoiseComparison(baselines=k),
        names,
        [("candidate_split", 0, False), ("candidate_resume", split, False)],
    )
    event = envelope.judge()
    rows = envelope.rows
    ratios = [row.worst.ratio for row in rows if row.worst is not None and row.phase]
    outcome = "PASS" if event is None else "FAIL" if event.kind == "candidate_left" else "ABSTAIN"
    message = ""
    if event is not None:
        entry = event.entry
        message = f"{event.kind} at step {event.step}: {event.differences[0].path}" + (
            f" ratio {entry.ratio:.3g}" if entry is not None and entry.ratio is not None else ""
        )
    return {
        **setting,
        "sources": sources,
        "outcome": outcome,
        "bitwise": not any(ratios),
        "largest_ratio": max((ratio for ratio in ratios if ratio is not None), default=0.0),
        "message": message,
        "seconds": 0.0,
    }


def run_composed(count: int, seed: int, pool_root: Path) -> list[dict[str, object]]:
    settings = draw_settings(count, seed)
    generator = random.Random(seed + 1)
    for setting in settings:
        setting["swapped"] = generator.random() < 0.3
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        for setting in settings:
            family = {key: setting[key] for key in ("mode", "total", "width", "outputs")}
            pool = pool_root / "_".join(f"{key}{value}" for key, value in family.items())
            pool.mkdir(parents=True, exist_ok=True)
            row = composed_check(pool, setting, Path(directory))
            rows.append(row)
            _print_row(row)
    return rows


def _print_row(row: dict[str, object]) -> None:
    print(
        f"{row['index']:4d} {row['mode']:7s} split {row['split']:2d}/{row['total']} "
        f"W={row['width']:3d} K={row['outputs']} k={row['baselines']} "
        f"{row['outcome']:7s} {'bitwise' if row['bitwise'] else 'hybrid ':7s} "
        f"ratio {row['largest_ratio']:.3g}"
        + (f" ({row['seconds']} s)" if row["seconds"] else "")
        + ("" if row["outcome"] == "PASS" else f"\n      {row['message']}"),
        flush=True,
    )


# The statistical model's numbers ------------------------------------------------------


def model_table(trials: int = 200_000, factor: float = 8.0) -> list[str]:
    """P(excursion > factor × noise) for a candidate exchangeable with k Gaussian samples.

    Each of the k samples and the candidate is an independent draw of an
    n-dimensional standard Gaussian (n: the effective number of independent
    directions the noise moves the path in); noise = the largest distance between
    two samples, excursion = the candidate's distance to the nearest sample.
    """
    import torch

    generator = torch.Generator().manual_seed(0)
    lines = [
        "| effective dimensions n | k = 2 | k = 3 | k = 5 |",
        "| --- | --- | --- | --- |",
    ]
    for dimensions in (1, 2, 3, 4, 8, 64):
        cells = []
        for k in (2, 3, 5):
            points = torch.randn(
                trials, k + 1, dimensions, generator=generator, dtype=torch.float64
            )
            samples, candidate = points[:, :k], points[:, k]
            excursion = (samples - candidate[:, None]).norm(dim=2).min(dim=1).values
            noise = torch.zeros(trials, dtype=torch.float64)
            for i in range(k):
                for j in range(i + 1, k):
                    noise = torch.maximum(noise, (samples[:, i] - samples[:, j]).norm(dim=1))
            exits = int((excursion > factor * noise).sum())
            cells.append(f"{exits / trials:.1e}" if exits else f"< {1 / trials:.0e}")
        lines.append(f"| {dimensions} | " + " | ".join(cells) + " |")
    return lines


def summary(rows: list[dict[str, object]]) -> list[str]:
    outcomes = Counter(
        "PASS, bit for bit"
        if row["outcome"] == "PASS" and row["bitwise"]
        else "PASS, inside the envelope"
        if row["outcome"] == "PASS"
        else row["outcome"]
        for row in rows
    )
    hybrids = [row for row in rows if not row["bitwise"]]
    lines = [
        "| verdict | checks |",
        "| --- | --- |",
        *(f"| {label} | {outcomes[label]} |" for label in sorted(outcomes)),
        f"| **in all** | **{len(rows)}** |",
        "",
        f"Candidates not bitwise a baseline: {len(hybrids)}; largest excursion/noise ratio "
        f"seen: {max((row['largest_ratio'] for row in rows), default=0.0):.3g}×.",
    ]
    for key in ("mode", "outputs", "baselines", "total"):
        counts = Counter((row[key], row["outcome"]) for row in rows)
        values = sorted({row[key] for row in rows}, key=str)
        parts = [
            f"{key}={value}: "
            + ", ".join(f"{outcome} {counts[(value, outcome)]}" for outcome in ("PASS", "FAIL"))
            for value in values
        ]
        lines.append("- " + "; ".join(parts))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=200, help="real check_resume runs")
    parser.add_argument("--composed", type=int, default=0, help="checks composed from a run pool")
    parser.add_argument("--pool", type=Path, help="keep the composed study's runs here")
    parser.add_argument("--model", action="store_true", help="print the model's exit table")
    parser.add_argument("--seed", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="skip the first N settings")
    parser.add_argument("--json", type=Path, help="write every check's row here")
    arguments = parser.parse_args()
    started = time.perf_counter()
    rows: list[dict[str, object]] = []
    if arguments.model:
        print("\n".join(model_table()))
        return 0
    if arguments.composed:
        with tempfile.TemporaryDirectory() as directory:
            rows = run_composed(
                arguments.composed, arguments.seed, arguments.pool or Path(directory)
            )
    else:
        settings = draw_settings(arguments.first + arguments.checks, arguments.seed)
        with tempfile.TemporaryDirectory() as directory, trainparity.shared_warm_servers():
            for setting in settings[arguments.first :]:
                rows.append(run_check(setting, Path(directory)))
                _print_row(rows[-1])
                if arguments.json:
                    arguments.json.write_text(json.dumps(rows, indent=1) + "\n")
    if arguments.json:
        arguments.json.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print()
    print("\n".join(summary(rows)))
    print(f"\n{len(rows)} checks in {time.perf_counter() - started:.0f} s")
    return 1 if any(row["outcome"] != "PASS" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
