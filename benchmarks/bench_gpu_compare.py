"""Benchmarks the CUDA compare kernels against device copy bandwidth and torch's isclose chain.

For float32 and bfloat16 pairs of 4 GiB each (the size is an option), all
measured in the same run on the same GPU:

- copy: `dst.copy_(src)` of one 4 GiB tensor; it reads 4 GiB and writes 4 GiB.
- kernel: trainparity's tolerance compare (rtol 1e-5, atol 1e-8) of a pair
  that differs in one element of every 4096; it reads both tensors, 8 GiB.
- torch: what a user writes for the same answers: `isclose`, `nonzero` of the
  mismatches, and the maxima of the absolute and relative differences.

Bytes per second count the bytes each operation moves to or from memory (8 GiB
for each of the three), so "kernel / copy" is the share of copy bandwidth the
compare reaches (target >= 0.75) and "kernel / torch" its speed-up over the
chain (target >= 3). Also shown: exact compares (equal and differing pairs),
the digest, and the host-streaming fallback. Medians of --repeats runs after a
warm-up; every timing synchronises the device.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import torch
from timing import median_seconds as shared_median_seconds
from trainparity._internal.native.cuda import (
    HOST_STREAM_BACKEND,
    KERNEL_BACKEND,
    DeviceTensorBytes,
    compare_buffers,
    digest_buffer,
)
from trainparity._internal.native.cuda_kernels import kernel_unavailable_reason, kernels_available

GIB = 1 << 30
RTOL, ATOL = 1e-5, 1e-8
TARGET_COPY_SHARE = 0.75
TARGET_TORCH_SPEEDUP = 3.0


def median_seconds(action: Callable[[], object], repeats: int) -> float:
    """Median wall time of `repeats` calls, synchronised with the GPU, after a warm-up call."""
    return shared_median_seconds(action, repeats, synchronize=torch.cuda.synchronize)


def copy_seconds(source: torch.Tensor, repeats: int) -> float:
    """Median time of a device-to-device copy of `source` into a tensor of its own."""
    target = torch.empty_like(source)
    return median_seconds(lambda: target.copy_(source), repeats)


def torch_chain(baseline: torch.Tensor, candidate: torch.Tensor) -> tuple:
    """The torch ops a user chains for count, first index and the largest errors."""
    mismatches = ~torch.isclose(candidate, baseline, RTOL, ATOL)
    indices = mismatches.nonzero()
    difference = (baseline - candidate).abs()
    return indices[:1], indices.shape[0], difference.max(), (difference / baseline.abs()).max()


def bench_dtype(dtype: torch.dtype, size_bytes: int, repeats: int) -> dict:
    name = str(dtype).removeprefix("torch.")
    count = size_bytes // dtype.itemsize
    generator = torch.Generator(device="cuda").manual_seed(0)
    baseline = torch.randn(count, device="cuda", dtype=dtype, generator=generator)
    candidate = baseline.clone()
    candidate[::4096] += 1e-2
    side_a, side_b = DeviceTensorBytes(baseline), DeviceTensorBytes(candidate)
    side_equal = DeviceTensorBytes(baseline.clone())
    moved = 2 * size_bytes
    print(f"{name}: two tensors of {size_bytes / GIB:.2f} GiB ({count} elements)")

    copy = copy_seconds(baseline, repeats)
    torch.cuda.empty_cache()

    def kernel_compare(a=side_a, b=side_b, **mode):
        result, backend = compare_buffers(name, a, b, **mode)
        assert backend == KERNEL_BACKEND, backend
        return result

    tolerance = median_seconds(lambda: kernel_compare(rtol=RTOL, atol=ATOL), repeats)
    small_blocks = median_seconds(
        lambda: kernel_compare(rtol=RTOL, atol=ATOL, launch_shape=(128, 0)), repeats
    )
    exact_equal = median_seconds(lambda: kernel_compare(b=side_equal), repeats)
    exact_differing = median_seconds(kernel_compare, repeats)
    chain = median_seconds(lambda: torch_chain(baseline, candidate), repeats)
    torch.cuda.empty_cache()
    digest = median_seconds(lambda: digest_buffer(side_a), repeats)
    result = kernel_compare(rtol=RTOL, atol=ATOL)

    stream_bytes = min(size_bytes, GIB // 2)
    stream_a = DeviceTensorBytes(baseline[: stream_bytes // dtype.itemsize])
    stream_b = DeviceTensorBytes(candidate[: stream_bytes // dtype.itemsize])
    streamed = median_seconds(
        lambda: compare_buffers(
            name, stream_a, stream_b, rtol=RTOL, atol=ATOL, backend=HOST_STREAM_BACKEND
        ),
        max(1, repeats // 2),
    )

    def line(label: str, seconds: float, nbytes: int) -> None:
        print(f"  {label:<46} {seconds * 1e3:9.2f} ms  {nbytes / seconds / 1e9:8.1f} GB/s")

    line("device copy (read + write)", copy, moved)
    line("kernel tolerance compare (differing pair)", tolerance, moved)
    line("  the same with 128-thread blocks", small_blocks, moved)
    line("kernel exact compare, equal pair", exact_equal, moved)
    line("kernel exact compare, differing pair", exact_differing, moved)
    line("torch isclose+nonzero+max chain", chain, moved)
    line("kernel digest of one tensor", digest, size_bytes)
    line(
        f"host-stream tolerance compare ({stream_bytes / GIB:.2f} GiB pair)",
        streamed,
        2 * stream_bytes,
    )
    copy_share = copy / tolerance
    speedup = chain / tolerance
    print(f"  kernel / copy bandwidth : {copy_share:.2f}  (target >= {TARGET_COPY_SHARE})")
    print(f"  kernel / torch chain    : {speedup:.2f}x (target >= {TARGET_TORCH_SPEEDUP})")
    print(
        f"  result: first={result[0]} count={result[1]} max_abs={result[2]!r} max_rel={result[3]!r}"
    )
    return {
        "dtype": name,
        "size_bytes": size_bytes,
        "median_seconds": {
            "copy": copy,
            "kernel_tolerance": tolerance,
            "kernel_tolerance_128_threads": small_blocks,
            "kernel_exact_equal": exact_equal,
            "kernel_exact_differing": exact_differing,
            "torch_chain": chain,
            "kernel_digest": digest,
            "host_stream_tolerance": streamed,
        },
        "host_stream_bytes": stream_bytes,
        "kernel_over_copy": copy_share,
        "kernel_over_torch": speedup,
        "meets_targets": copy_share >= TARGET_COPY_SHARE and speedup >= TARGET_TORCH_SPEEDUP,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=4.0, help="bytes per tensor, in GiB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU")
    if not kernels_available():
        raise SystemExit(f"the CUDA kernels are unavailable: {kernel_unavailable_reason()}")
    size_bytes = int(args.size_gib * GIB) // 16 * 16
    print(
        f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    )
    figures = [
        bench_dtype(dtype, size_bytes, args.repeats) for dtype in (torch.float32, torch.bfloat16)
    ]
    if args.json:
        with open(args.json, "w") as stream:
            json.dump(
                {"device": torch.cuda.get_device_name(), "results": figures}, stream, indent=2
            )


if __name__ == "__main__":
    main()
