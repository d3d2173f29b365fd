"""Benchmarks the user-facing surfaces: snapshot-file diff against in-memory compare and torch, and the fingerprint."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from timing import median_seconds
from trainparity import compare_states
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.state.snapshot_file import write_snapshot

MIB = 1024 * 1024


def torch_statistics(baseline: dict, candidate: dict) -> list:
    """What a user would write in torch: per-tensor mismatches, max abs/rel, relative RMS."""
    rows = []
    for name, left in baseline.items():
        right = candidate[name]
        difference = (left.double() - right.double()).abs()
        rows.append(
            (
                int((left != right).sum()),
                float(difference.max()),
                float((difference / left.double().abs().clamp_min(1e-300)).max()),
                float(difference.norm() / right.double().norm()),
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=64, help="float32 state size per side")
    parser.add_argument("--tensors", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    arguments = parser.parse_args()

    elements = arguments.mib * MIB // 4 // arguments.tensors
    generator = torch.Generator().manual_seed(0)
    baseline = {
        f"layer{i}.weight": torch.randn(elements, generator=generator)
        for i in range(arguments.tensors)
    }
    candidate = {name: value * (1 + 1e-6) for name, value in baseline.items()}
    print(
        f"{arguments.tensors} float32 tensors, {arguments.mib} MiB per side, median of {arguments.repeats}"
    )
    with tempfile.TemporaryDirectory() as directory:
        left, right = Path(directory) / "a.safetensors", Path(directory) / "b.safetensors"
        write_snapshot(left, baseline)  # records this process's fingerprint
        write_snapshot(right, candidate)
        seconds_torch = median_seconds(
            lambda: torch_statistics(baseline, candidate), arguments.repeats
        )
        seconds_memory = median_seconds(
            lambda: compare_states(baseline, candidate), arguments.repeats
        )
        seconds_diff = median_seconds(lambda: diff_snapshots(left, right), arguments.repeats)
    print(f"  torch per-tensor statistics (float64)      {seconds_torch * 1e3:9.1f} ms")
    print(f"  compare_states, in memory                  {seconds_memory * 1e3:9.1f} ms")
    print(f"  diff_snapshots, two files (mmap)           {seconds_diff * 1e3:9.1f} ms")
    print(f"     ratio diff_snapshots / compare_states : {seconds_diff / seconds_memory:.2f}")
    print(f"     ratio torch / diff_snapshots          : {seconds_torch / seconds_diff:.2f}")
    fingerprint = median_seconds(environment_fingerprint, arguments.repeats * 4)
    print(f"  environment_fingerprint()                  {fingerprint * 1e3:9.2f} ms")


if __name__ == "__main__":
    main()
