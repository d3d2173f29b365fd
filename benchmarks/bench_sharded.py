"""Sharded and elastic costs: record() of an FSDP2 state per rank, chained and elastic checks vs by hand.

    python benchmarks/bench_sharded.py [--megabytes 64] [--repeats 5] [--skip-elastic] [--record-only]
        [--two-d] [--deepspeed [--million 100]]

Prints one line per ratio, with the targets of issue 22:

- record() per rank of an FSDP2 state sharded over 2 gloo ranks ≤ 0.6× the
  record() of the same full state on one rank (local shards only, no
  gather); CPU time of one record() into an open recording (bench_record's
  timing), summary and full mode;
- with --two-d (issue 44), the same on 4 gloo ranks of a 2x2 ("dp", "tp")
  mesh (each layer ColwiseParallel over "tp", then fully_shard over "dp":
  placements (_StridedShard(dim=0, sf=2), Shard(dim=0)), a quarter per
  rank) ≤ 0.35× the full state on one rank;
- with --deepspeed (issue 44), `load_deepspeed` of a ZeRO-2 checkpoint of a
  model of `--million` million parameters saved by 2 gloo ranks
  (deepspeed_checkpoint_job.py) ≤ 1.5× DeepSpeed's own
  `get_fp32_state_dict_from_zero_checkpoint` of the same directory (median
  wall time, page cache warm), and the bytes each reads through read() (the
  process's `rchar`) against the directory's size. load_deepspeed maps the
  files (torch.load(mmap=True)) and reads none through read(); its bytes are
  touched once, when the partitions are copied into named tensors. Needs
  `deepspeed`; its shm op is built on the first run ($TORCH_EXTENSIONS_DIR);
- check_resume with split_steps=(2, 4) (tests/fixtures/chain_job.py) and
  with world_sizes=(2, 1) (docs/examples/fsdp2_project) ≤ 1.1× the sum of
  their phases run by hand, one after the other (wall time).
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

from timing import median_seconds

REPO = Path(__file__).resolve().parent.parent
FSDP2_PROJECT = REPO / "docs" / "examples" / "fsdp2_project"


def record_worker(megabytes: int, repeats: int, output: Path, two_d: bool) -> None:
    """One rank of the torchrun job: times record() of its shards; rank 0 also of the full state."""
    import torch
    import torch.distributed as dist

    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rows = (megabytes << 20) // 4 // 1024 // 8
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(1024, rows, bias=False) for _ in range(8)))
    mesh = None
    if two_d:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

        world = dist.get_world_size()
        mesh_2d = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        for layer in model:
            parallelize_module(layer, mesh_2d["tp"], ColwiseParallel())
        mesh = mesh_2d["dp"]
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sharded = dict(model.state_dict())
    full = {name: tensor.full_tensor() for name, tensor in sharded.items()}  # collective
    timings = {}
    with tempfile.TemporaryDirectory() as work:
        counter = iter(range(1 << 30))
        for mode in ("summary", "full"):
            states = {"sharded": sharded, "full": full} if rank == 0 else {"sharded": sharded}
            for kind, state in states.items():
                seconds = sorted(
                    _one_record(state, mode, Path(work) / f"run{next(counter)}", rank)
                    for _ in range(repeats)
                )
                timings[f"{kind}_{mode}"] = seconds[repeats // 2]
    (output / f"rank{rank}.json").write_text(json.dumps(timings))
    dist.barrier()
    dist.destroy_process_group()


def _one_record(state: dict, mode: str, directory: Path, rank: int) -> float:
    """CPU seconds of one record() into an open recording (as bench_record times it)."""
    import trainparity
    from trainparity._internal.recording import recording_to

    with recording_to(directory, mode=mode, rank=rank) as path:
        trainparity.record(0, {"warm": 0})  # opens the file and writes the head
        began = time.process_time()
        trainparity.record(1, state)
        seconds = time.process_time() - began
    path.unlink()
    return seconds


def record_ratios(megabytes: int, repeats: int, two_d: bool) -> None:
    count, target = (4, 0.35) if two_d else (2, 0.6)
    with tempfile.TemporaryDirectory() as work:
        argv = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={count}", __file__, "--worker", work,
            "--megabytes", str(megabytes), "--repeats", str(repeats),
            *(["--two-d"] if two_d else []),
        ]  # fmt: skip
        environment = {**os.environ, "OMP_NUM_THREADS": "1"}
        subprocess.run(argv, check=True, env=environment, cwd=Path(__file__).parent)
        ranks = [json.loads((Path(work) / f"rank{r}.json").read_text()) for r in range(count)]
    layout = "FSDP2 x TP layers on a 2x2 mesh of 4" if two_d else "FSDP2 layers on 2"
    print(f"state: {megabytes} MiB float32 in 8 {layout} gloo ranks; medians of {repeats}")
    for mode in ("summary", "full"):
        slowest = max(rank[f"sharded_{mode}"] for rank in ranks)
        whole = ranks[0][f"full_{mode}"]
        print(
            f"{mode} record() per rank / full state on one rank: {slowest / whole:.2f}  "
            f"(target <= {target}; {slowest * 1e3:.1f} ms vs {whole * 1e3:.1f} ms CPU)"
        )


def check_versus_by_hand(label: str, spec: str, cwd: Path, phases, **options) -> None:
    """check_resume's wall time against its training phases run one by one by hand."""
    import trainparity
    from trainparity._internal.cases.loading import load_process_case
    from trainparity.protocols import ProcessExecutionPlan

    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    sys.path.insert(0, str(cwd))
    case = load_process_case(spec)
    with tempfile.TemporaryDirectory() as work:
        began = time.perf_counter()
        checkpoints: dict[str, Path] = {}
        for name, end_step, resume_of, world_size in phases:
            run_dir = Path(work) / name
            run_dir.mkdir()
            plan = ProcessExecutionPlan(
                name, cwd, run_dir, end_step, checkpoints.get(resume_of), world_size
            )
            subprocess.run(
                list(case.command(plan)), check=True, cwd=cwd, env=environment,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            checkpoints[name] = case.checkpoint_path(run_dir)
            case.observe_checkpoint(checkpoints[name])
        by_hand = time.perf_counter() - began
        began = time.perf_counter()
        result = trainparity.check_resume(
            spec,
            cwd=cwd,
            temporary_root=Path(work),
            environment={"OMP_NUM_THREADS": "1"},
            **options,
        )
        checked = time.perf_counter() - began
    print(
        f"{label}: check_resume / phases by hand: {checked / by_hand:.2f}  (target <= 1.1; "
        f"{result.outcome.value}, {checked:.1f} s vs {by_hand:.1f} s)"
    )


def read_characters() -> int:
    """Bytes this process has read through read() and friends so far (/proc/self/io `rchar`)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError("/proc/self/io has no rchar line")


def deepspeed_load_ratio(million: int, repeats: int) -> None:
    """load_deepspeed against DeepSpeed's own fp32 reassembly of one ZeRO-2 checkpoint."""
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
    from trainparity.checkpoints import load_deepspeed

    with tempfile.TemporaryDirectory(prefix="bench-deepspeed-") as scratch:
        checkpoint = Path(scratch) / "checkpoint"
        environment = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
        job = Path(__file__).resolve().parent / "deepspeed_checkpoint_job.py"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        command += ["--nproc-per-node=2", str(job), "--checkpoint", str(checkpoint)]
        command += ["--million", str(million)]
        subprocess.run(command, env=environment, check=True, stdout=subprocess.DEVNULL)
        size = sum(file.stat().st_size for file in checkpoint.rglob("*") if file.is_file())
        theirs = median_seconds(
            lambda: get_fp32_state_dict_from_zero_checkpoint(str(checkpoint)), repeats
        )
        ours = median_seconds(lambda: load_deepspeed(checkpoint), repeats)
        before = read_characters()
        get_fp32_state_dict_from_zero_checkpoint(str(checkpoint))
        their_read = read_characters() - before
        before = read_characters()
        state = load_deepspeed(checkpoint)
        our_read = read_characters() - before
        parameters = sum(tensor.numel() for tensor in state["fp32"].values())
    print(
        f"load_deepspeed, ZeRO-2 on 2 ranks, {parameters / 1e6:.0f}M parameters "
        f"({size / 2**30:.2f} GiB on disk): {ours:.2f} s vs DeepSpeed's "
        f"get_fp32_state_dict_from_zero_checkpoint {theirs:.2f} s = {ours / theirs:.2f}x "
        f"(target <= 1.5); read() bytes / directory size: load_deepspeed "
        f"{our_read / size:.2f}x (it maps the files: torch.load(mmap=True)), DeepSpeed "
        f"{their_read / size:.2f}x"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-elastic", action="store_true")
    parser.add_argument("--record-only", action="store_true")
    parser.add_argument("--two-d", action="store_true", help="record() on a 2x2 (dp, tp) mesh")
    parser.add_argument("--deepspeed", action="store_true", help="load_deepspeed vs DeepSpeed")
    parser.add_argument("--million", type=int, default=100, help="--deepspeed's model size")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.deepspeed:
        deepspeed_load_ratio(arguments.million, arguments.repeats)
        return 0
    if arguments.worker is not None:
        record_worker(arguments.megabytes, arguments.repeats, arguments.worker, arguments.two_d)
        return 0
    record_ratios(arguments.megabytes, arguments.repeats, arguments.two_d)
    if arguments.record_only:
        return 0
    sys.path.insert(0, str(REPO))
    chain = [
        ("baseline_a", 6, None, None),
        ("baseline_b", 6, None, None),
        ("candidate_split", 2, None, None),
        ("candidate_resume_1", 4, "candidate_split", None),
        ("candidate_resume", 6, "candidate_resume_1", None),
    ]
    check_versus_by_hand("chained (2, 4) of 6", "tests.fixtures.chain_cases:ChainCase", REPO, chain)
    if not arguments.skip_elastic:
        from trainparity import ToleranceComparison

        elastic = [
            ("baseline_a", 4, None, 2),
            ("baseline_b", 4, None, 2),
            ("candidate_split", 2, None, 2),
            ("candidate_resume", 4, "candidate_split", 1),
        ]
        check_versus_by_hand(
            "elastic 2 -> 1 ranks (FSDP2)",
            "parity_case:FsdpResumeCase",
            FSDP2_PROJECT,
            elastic,
            world_sizes=(2, 1),
            comparison=ToleranceComparison(rtol=1e-4, atol=1e-6),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
