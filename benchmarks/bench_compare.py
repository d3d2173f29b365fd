"""Benchmarks the native compare core against `bytes ==` and torch on the same buffers."""

from __future__ import annotations

import argparse

import torch
import trainparity
from timing import median_seconds
from trainparity._internal.native.core import core, tensor_bytes

MIB = 1024 * 1024
GIB = 1024 * MIB


def available_bytes() -> int:
    """MemAvailable from /proc/meminfo (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def report(label: str, seconds: float, nbytes: int) -> None:
    print(f"  {label:<44} {seconds * 1e3:9.1f} ms  {nbytes / seconds / GIB:6.2f} GiB/s per side")


def bench_exact(size_bytes: int, repeats: int) -> None:
    """1. Exact compare of two equal float32 buffers against `bytes ==`."""
    print(f"1. exact compare of two equal {size_bytes // MIB} MiB float32 buffers")
    baseline = torch.randn(size_bytes // 4).numpy().tobytes()
    candidate = bytes(bytearray(baseline))  # a distinct object with equal bytes
    bytes_equal = median_seconds(lambda: baseline == candidate, repeats)
    report("bytes ==", bytes_equal, size_bytes)
    for threads in (1, 2):
        result = core.compare("float32", baseline, candidate, threads=threads)
        assert result == (-1, 0, 0.0, 0.0, 0.0), result
        seconds = median_seconds(
            lambda t=threads: core.compare("float32", baseline, candidate, threads=t), repeats
        )
        report(f"core.compare exact, threads={threads}", seconds, size_bytes)
        print(f"     bandwidth ratio core/bytes== : {bytes_equal / seconds:.2f} (target >= 0.7)")


def torch_mismatch_chain(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> int:
    """What a torch user writes for the same answers: mismatches, max abs and rel error."""
    mismatches = ~torch.isclose(a, b, rtol, atol)
    indices = mismatches.nonzero()
    difference = (a - b).abs()
    difference.max()
    (difference / a.abs()).max()
    return int(indices[0, 0]) if indices.numel() else -1


def bench_tolerance(size_bytes: int, repeats: int) -> None:
    """2. Tolerance compare with one late mismatch against torch's isclose chain."""
    rtol, atol = 1e-5, 1e-8
    # torch's chain holds about five tensors of the input size at its peak.
    if size_bytes >= GIB and available_bytes() < 8 * size_bytes:
        print(
            f"   (only {available_bytes() / GIB:.1f} GiB available: using 256 MiB, not "
            f"{size_bytes // MIB} MiB)"
        )
        size_bytes = 256 * MIB
    count = size_bytes // 4
    print(
        f"2. tolerance compare (rtol={rtol}, atol={atol}) of {size_bytes // MIB} MiB float32 "
        f"tensors with one mismatch at element {count - 3}"
    )
    a = torch.randn(count)
    b = a.clone()
    b[count - 3] += 1.0
    a_bytes, b_bytes = tensor_bytes(a), tensor_bytes(b)
    assert torch_mismatch_chain(a, b, rtol, atol) == count - 3
    torch_seconds = median_seconds(lambda: torch_mismatch_chain(a, b, rtol, atol), repeats)
    report(f"torch chain ({torch.get_num_threads()} threads)", torch_seconds, size_bytes)
    for threads in (1, 2):
        result = core.compare("float32", a_bytes, b_bytes, rtol=rtol, atol=atol, threads=threads)
        assert result[:2] == (count - 3, 1), result
        seconds = median_seconds(
            lambda t=threads: core.compare(
                "float32", a_bytes, b_bytes, rtol=rtol, atol=atol, threads=t
            ),
            repeats,
        )
        report(f"core.compare tolerance, threads={threads}", seconds, size_bytes)
        print(f"     speed-up over torch: {torch_seconds / seconds:.1f}x (target >= 3x)")


def bench_compare_states(size_bytes: int, repeats: int) -> None:
    """3. compare_states on a state_dict of a few large float32 tensors vs torch.equal."""
    print(f"3. compare_states on a {size_bytes // MIB} MiB state_dict of 4 float32 tensors")
    compare_states = getattr(trainparity, "compare_states", None)
    if compare_states is None:
        print("   skipped: trainparity.compare_states does not exist yet")
        return
    per_tensor = size_bytes // 4 // 4
    baseline = {f"layer{i}.weight": torch.randn(per_tensor) for i in range(4)}
    candidate = {name: tensor.clone() for name, tensor in baseline.items()}

    def torch_equal_all() -> bool:
        return all(torch.equal(baseline[name], candidate[name]) for name in baseline)

    assert torch_equal_all()
    torch_seconds = median_seconds(torch_equal_all, repeats)
    report("torch.equal per tensor", torch_seconds, size_bytes)
    ours = median_seconds(lambda: compare_states(baseline, candidate, comparison=None), repeats)
    report("trainparity.compare_states", ours, size_bytes)
    print(f"     ratio torch.equal/compare_states: {torch_seconds / ours:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--size-mib",
        type=int,
        default=1024,
        help="bytes per buffer in MiB (default 1024; shrink for a quick run)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure")
    args = parser.parse_args()
    size_bytes = args.size_mib * MIB
    print(
        f"trainparity {trainparity.__version__}, torch {torch.__version__}, "
        f"median of {args.repeats} runs"
    )
    bench_exact(size_bytes, args.repeats)
    bench_tolerance(size_bytes, args.repeats)
    bench_compare_states(size_bytes, args.repeats)


if __name__ == "__main__":
    main()
