"""What the crash check costs (issue 51), as ratios measured in one run.

    python benchmarks/bench_crashes.py [--repeats 3] [--state-mb 64]

1. Tracing overhead: a job times its own training steps and its saves
   (torch.save of a `--state-mb` state, temp file + rename) in-process, once
   plain and once under the crash check's tracer; medians of `--repeats`
   runs. Targets: a traced save <= 1.5x, a traced step <= 1.05x.
2. Crash points per save format: one save of the same state with torch.save,
   safetensors and DCP, traced: how many crash points each makes, and how
   many distinct disk images they leave (points grouped by the calls that
   change a byte or a name).
3. Exploring a small job (tests/fixtures/crash_jobs/plain_job.py, --save
   durable, 4 steps) with check_crashes, against (distinct disk images) x
   (one uninterrupted run of the job). Target: <= 1.3x. Then the same check
   with start="warm" against fresh (interleaved, medians of `--repeats`), and
   whether both found the same rows.

Prints one line per measurement; run it on a quiet machine and quote medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPOSITORY / "python"))

from trainparity import CommandCase, check_crashes  # noqa: E402
from trainparity._internal.crashes.points import crash_points  # noqa: E402
from trainparity._internal.processes.traced_job import run_traced  # noqa: E402

TIMED_JOB = """
import json, os, sys, time, torch
root, megabytes = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0); torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
opt = torch.optim.AdamW(model.parameters())
x = torch.randn(32, 64)
big = {"blob": torch.randn(megabytes * 262144)}
steps, saves = [], []
for step in range(60):
    began = time.perf_counter()
    for _ in range(20):
        loss = model(x).square().mean(); opt.zero_grad(); loss.backward(); opt.step()
    steps.append(time.perf_counter() - began)
for index in range(3):
    began = time.perf_counter()
    path = os.path.join(root, f"ck_{index}.pt")
    torch.save({"model": model.state_dict(), **big}, path + ".tmp")
    os.replace(path + ".tmp", path)
    saves.append(time.perf_counter() - began)
print(json.dumps({"step": sorted(steps)[len(steps) // 2], "save": sorted(saves)[1]}))
"""

FORMAT_JOB = """
import os, sys, torch
root, kind = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
state = {f"layer{i}.weight": torch.randn(256, 256) for i in range(8)}
if kind == "torch.save":
    torch.save(state, os.path.join(root, "model.pt"))
elif kind == "safetensors":
    from safetensors.torch import save_file
    save_file(state, os.path.join(root, "model.safetensors"))
else:
    import torch.distributed.checkpoint as dcp
    dcp.save(state, checkpoint_id=os.path.join(root, "dcp"), no_dist=True)
"""


def _environment() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPOSITORY / "python")}


def _timed(script: Path, work: Path, megabytes: int, traced: bool) -> dict[str, float]:
    root = work / "root"
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, str(script), str(root), str(megabytes)]
    out, err = work / "out.log", work / "err.log"
    work.mkdir(parents=True, exist_ok=True)
    if traced:
        run = run_traced(
            argv, env=_environment(), cwd=work, stdout_path=out, stderr_path=err, root=root
        )
        assert run.returncode == 0, err.read_text()
    else:
        import subprocess

        with open(out, "w") as stdout, open(err, "w") as stderr:
            subprocess.run(
                argv, env=_environment(), cwd=work, stdout=stdout, stderr=stderr, check=True
            )
    return json.loads(out.read_text().strip().splitlines()[-1])


def tracing_overhead(work: Path, repeats: int, megabytes: int) -> None:
    script = work / "timed_job.py"
    script.write_text(textwrap.dedent(TIMED_JOB))
    found: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for repeat in range(repeats):
        # Interleaved, each order in turn: drift in the machine's load hits both alike.
        for traced in (False, True) if repeat % 2 == 0 else (True, False):
            found[traced].append(
                _timed(script, work / f"t{repeat}{int(traced)}", megabytes, traced)
            )
    for key, target in (("save", 1.5), ("step", 1.05)):
        plain = statistics.median(entry[key] for entry in found[False])
        traced = statistics.median(entry[key] for entry in found[True])
        print(
            f"tracing overhead, {key}: plain {plain * 1e3:.1f} ms, traced {traced * 1e3:.1f} ms, "
            f"ratio {traced / plain:.3f} (target <= {target})"
        )


def points_per_format(work: Path) -> None:
    script = work / "format_job.py"
    script.write_text(textwrap.dedent(FORMAT_JOB))
    for kind in ("torch.save", "safetensors", "dcp"):
        root = work / kind.replace(".", "_")
        root.mkdir(parents=True, exist_ok=True)
        run = run_traced(
            [sys.executable, str(script), str(root), kind],
            env=_environment(),
            cwd=work,
            stdout_path=work / "out.log",
            stderr_path=work / "err.log",
            root=root,
        )
        assert run.returncode == 0, (work / "err.log").read_text()
        points = crash_points(("saves",), run.events, [])
        images = len({point.image_class for point in points}) + 1  # and the finished save's
        ops = sorted({event.op for event in run.mutations})
        print(
            f"crash points of one {kind} save (8 tensors, 2 MiB): {len(points)} points, "
            f"{images} distinct disk images (the finished save's among them); calls: {', '.join(ops)}"
        )


def exploration_cost(work: Path, repeats: int) -> None:
    case = CommandCase(
        template=[
            "python",
            "tests/fixtures/crash_jobs/plain_job.py",
            "--ckpt-dir",
            "{checkpoint}",
            "--total-steps",
            "{end_step}",
            "--save-every",
            "2",
            "--save",
            "durable",
        ],
        checkpoint="{run_dir}/ckpts",
        total_step=4,
    )
    totals: dict[str, list[float]] = {"fresh": [], "warm": []}
    rows: dict[str, object] = {}
    for _ in range(repeats):
        for start in ("fresh", "warm"):  # interleaved: load hits both alike
            began = time.perf_counter()
            result = check_crashes(
                case,
                cwd=REPOSITORY,
                # One hash seed: the warm runs share one server (docs/limitations.md).
                environment={
                    "OMP_NUM_THREADS": "1",
                    "PYTHONHASHSEED": "0",
                    "TRAINPARITY_WARM_PRELOAD": "torch._dynamo",
                },
                temporary_root=work,
                timeout=300,
                start=start,
            )
            totals[start].append(time.perf_counter() - began)
            rows.setdefault(start, result.crash_points)
            if start == "fresh":
                one_run = statistics.median(
                    result.timing_seconds[key] for key in ("baseline_a", "baseline_b")
                )
                budget = result.distinct_images * one_run
                print(
                    f"exploring plain_job --save durable: {result.outcome}, "
                    f"{result.points_found} points, {result.distinct_images} distinct images, "
                    f"{result.crash_runs} crash runs, {result.restarts} restarts, "
                    f"{totals[start][-1]:.1f} s; one run {one_run:.2f} s; ratio to images x one "
                    f"run {totals[start][-1] / budget:.2f} (target <= 1.3; two jobs at a time)"
                )
    fresh, warm = statistics.median(totals["fresh"]), statistics.median(totals["warm"])
    print(
        f"the same check warm (start='warm') / fresh: {warm:.1f} s / {fresh:.1f} s = "
        f"{warm / fresh:.2f}x, medians of {repeats}; same rows: {rows['warm'] == rows['fresh']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--state-mb", type=int, default=64)
    parser.add_argument("--skip-exploration", action="store_true")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-crashes-") as directory:
        work = Path(directory)
        tracing_overhead(work, arguments.repeats, arguments.state_mb)
        points_per_format(work)
        if not arguments.skip_exploration:
            exploration_cost(work, arguments.repeats)


if __name__ == "__main__":
    main()
