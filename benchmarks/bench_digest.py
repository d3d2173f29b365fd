"""Measures digest versions 1 and 2 against hashlib.sha256 and a single-thread memcpy of the same buffer.

Targets for the current version at one thread: at least 10x sha256 and at
least half the speed of a single-thread memcpy (reading and writing the
buffer once). All figures are medians of --repeats timed runs after a warm-up.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import platform
from pathlib import Path

from timing import median_seconds
from trainparity import _trainparity as core

TARGET_RATIO_VS_SHA256 = 10.0
TARGET_RATIO_VS_MEMCPY = 0.5


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
    current = figures[f"v{core.DIGEST_VERSION} threads=1"]
    ratios = {"sha256": current / figures["sha256"], "memcpy": current / figures["memcpy"]}
    met = {
        "sha256": ratios["sha256"] >= TARGET_RATIO_VS_SHA256,
        "memcpy": ratios["memcpy"] >= TARGET_RATIO_VS_MEMCPY,
    }

    print(
        f"buffer: {args.size_mib} MiB of random bytes, median of {args.repeats} runs, "
        f"{os.cpu_count()} CPUs, {platform.machine()}; digest v2 path: {core.DIGEST_PATH} "
        f"(available: {', '.join(core.DIGEST_PATHS)})"
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
