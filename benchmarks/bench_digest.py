"""Measures digest versions 1 and 2 against hashlib.sha256 and a single-thread memcpy of the same buffer.

Targets for the current version at one thread: at least 10x sha256 and at
least half the speed of a single-thread memcpy (reading and writing the
buffer once). The fused digest+summary pass (digest_summary) of a float32
buffer of normal values is measured against the digest alone of the same
buffer at the same thread count: target at least 0.8x. All figures are
medians of --repeats timed runs after a warm-up.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
from pathlib import Path

import torch
from timing import median_seconds
from trainparity import _trainparity as core

TARGET_RATIO_VS_SHA256 = 10.0
TARGET_RATIO_VS_MEMCPY = 0.5
TARGET_RATIO_FUSED_VS_DIGEST = 0.8


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=1024, help="buffer size (default 1 GiB)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    size_bytes = args.size_mib << 20
    # Random bytes, not zeros: untouched zero pages all map one physical page and
    # would be read from cache, which no real tensor is.
    data = os.urandom(size_bytes)
    target = bytearray(size_bytes)  # written once here, so its pages exist before timing
    target_address = ctypes.addressof((ctypes.c_char * size_bytes).from_buffer(target))

    def gb_per_s(action) -> float:
        return size_bytes / median_seconds(action, args.repeats) / 1e9

    figures = {
        "sha256": gb_per_s(lambda: hashlib.sha256(data).digest()),
        "memcpy": gb_per_s(lambda: ctypes.memmove(target_address, data, size_bytes)),
    }
    for version in core.DIGEST_VERSIONS:
        for threads in (1, 2):
            figures[f"v{version} threads={threads}"] = gb_per_s(
                lambda v=version, t=threads: core.digest(data, version=v, threads=t)
            )
    # A float32 tensor's bytes: values of a real state, not random bit patterns
    # (whose NaNs and Infs are rare in training and counted on a slower branch).
    values = torch.randn(size_bytes // 4, generator=torch.Generator().manual_seed(0))
    floats = memoryview(values.numpy()).cast("B")
    fused_ratios = {}
    for threads in (1, 2):
        digest_alone = gb_per_s(lambda t=threads: core.digest(floats, threads=t))
        fused = gb_per_s(lambda t=threads: core.digest_summary("float32", floats, threads=t))
        summary_alone = gb_per_s(lambda t=threads: core.summary("float32", floats, threads=t))
        figures[f"float32 digest threads={threads}"] = digest_alone
        figures[f"float32 fused threads={threads}"] = fused
        figures[f"float32 summary threads={threads}"] = summary_alone
        fused_ratios[threads] = fused / digest_alone
    current = figures[f"v{core.DIGEST_VERSION} threads=1"]
    ratios = {"sha256": current / figures["sha256"], "memcpy": current / figures["memcpy"]}
    ratios.update({f"fused threads={t}": ratio for t, ratio in fused_ratios.items()})
    met = {
        "sha256": ratios["sha256"] >= TARGET_RATIO_VS_SHA256,
        "memcpy": ratios["memcpy"] >= TARGET_RATIO_VS_MEMCPY,
        "fused": min(fused_ratios.values()) >= TARGET_RATIO_FUSED_VS_DIGEST,
    }

    print(
        f"buffer: {args.size_mib} MiB of random bytes, median of {args.repeats} runs, "
        f"{os.cpu_count()} CPUs, {platform.machine()}; digest v2 path: {core.DIGEST_PATH} "
        f"(available: {', '.join(core.DIGEST_PATHS)}); statistics path: {core.SUMMARY_PATH}"
    )
    for name, value in figures.items():
        relative = (
            f"{value / figures['sha256']:6.1f}x sha256  {value / figures['memcpy']:5.2f}x memcpy"
        )
        print(f"{name:18s} {value:7.2f} GB/s  {relative}")
    for version in core.DIGEST_VERSIONS:
        scaling = figures[f"v{version} threads=2"] / figures[f"v{version} threads=1"]
        print(f"v{version} scaling 1 -> 2 threads: {scaling:.2f}x")
    print(
        f"v{core.DIGEST_VERSION} threads=1 vs sha256: {ratios['sha256']:.1f}x "
        f"(target >= {TARGET_RATIO_VS_SHA256:.0f}x: {'met' if met['sha256'] else 'MISSED'})"
    )
    print(
        f"v{core.DIGEST_VERSION} threads=1 vs memcpy: {ratios['memcpy']:.2f}x "
        f"(target >= {TARGET_RATIO_VS_MEMCPY}x: {'met' if met['memcpy'] else 'MISSED'})"
    )
    for threads, ratio in fused_ratios.items():
        print(
            f"float32 fused digest+summary vs digest alone, threads={threads}: {ratio:.2f}x "
            f"(target >= {TARGET_RATIO_FUSED_VS_DIGEST}x: "
            f"{'met' if ratio >= TARGET_RATIO_FUSED_VS_DIGEST else 'MISSED'})"
        )
    if args.json is not None:
        report = {
            "size_mib": args.size_mib,
            "repeats": args.repeats,
            "path": core.DIGEST_PATH,
            "gb_per_s": figures,
            "ratios": ratios,
            "met": met,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
