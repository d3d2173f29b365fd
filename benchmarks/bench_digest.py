"""Measures digest throughput against hashlib.sha256 and its scaling from one to two threads."""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import time
from collections.abc import Callable

from trainparity import _trainparity

TARGET_RATIO_VS_SHA256 = 5.0


def median_gb_per_s(hash_once: Callable[[], object], size_bytes: int, repeats: int) -> float:
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        hash_once()
        seconds.append(time.perf_counter() - start)
    return size_bytes / statistics.median(seconds) / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=1024, help="buffer size (default 1 GiB)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant")
    args = parser.parse_args()
    size_bytes = args.size_mib << 20
    # Random bytes, not zeros: untouched zero pages all map one physical page and
    # would be read from cache, which no real tensor is.
    data = os.urandom(size_bytes)
    _trainparity.digest(data)  # fault the pages in before timing anything

    sha256 = median_gb_per_s(lambda: hashlib.sha256(data).digest(), size_bytes, args.repeats)
    one_thread = median_gb_per_s(lambda: _trainparity.digest(data), size_bytes, args.repeats)
    two_threads = median_gb_per_s(
        lambda: _trainparity.digest(data, threads=2), size_bytes, args.repeats
    )
    ratio = one_thread / sha256
    verdict = "met" if ratio >= TARGET_RATIO_VS_SHA256 else "MISSED"
    scaling = two_threads / one_thread
    print(f"buffer: {args.size_mib} MiB, median of {args.repeats} runs, {os.cpu_count()} CPUs")
    print(f"hashlib.sha256:    {sha256:7.2f} GB/s")
    print(
        f"digest threads=1:  {one_thread:7.2f} GB/s  ({ratio:.1f}x sha256, "
        f"target >= {TARGET_RATIO_VS_SHA256:.0f}x: {verdict})"
    )
    print(f"digest threads=2:  {two_threads:7.2f} GB/s  ({scaling:.2f}x threads=1)")


if __name__ == "__main__":
    main()
