"""What record() costs: summary mode vs the digest alone, full mode vs torch.save, bytes per tensor.

    python benchmarks/bench_record.py [--megabytes 256] [--repeats 5]

Prints one line per ratio (medians of `--repeats` runs, one process) and the
targets from docs/trajectories.md:

- summary-mode record() of a float32 state ≥ 0.8× the speed of its digest alone;
- full-mode record() ≤ 1.2× a torch.save of the same state;
- summary mode stores ≤ 128 bytes per tensor per step;
- the resume quickstart with record() after every step ≤ 1.1× its time without.

And how full mode writes (issue 43), against what the machine allows:
- full record() / one buffered `write` of the same bytes from memory (the
  floor: the kernel's one copy into the page cache);
- full record() of the same state loaded with `torch.load(mmap=True)` (its
  tensors copied file to file by copy_file_range) / full record() from memory;
- whether `O_DIRECT` works on the recording's file system, and a direct
  write's time / the buffered write's (page-aligned buffer, sizes in whole
  pages).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import trainparity
from timing import median_seconds
from trainparity._internal.native.cuda import digest_buffer
from trainparity._internal.recording import recording_to
from trainparity._internal.state.freeze import freeze


def state_of(megabytes: int) -> dict[str, torch.Tensor]:
    """A float32 state of `megabytes` MiB in 16 tensors."""
    elements = (megabytes << 20) // 4 // 16
    return {f"layer{index}.weight": torch.randn(elements) for index in range(16)}


def digest_only(state: dict[str, torch.Tensor]) -> None:
    frozen = freeze(state, copy=False)
    for _, tensor in frozen.entries:
        digest_buffer(tensor.data)


def recorded(
    state: dict[str, torch.Tensor], mode: str, directory: Path, clock=time.perf_counter
) -> float:
    """Seconds (wall, or `clock`'s) of one record() call into a fresh recording (file creation excluded).

    The file is removed afterwards, as torch.save's target is overwritten, so
    neither side pays for a filling disk.
    """
    with recording_to(directory, mode=mode) as path:
        trainparity.record(0, {"warm": 0})  # opens the file and writes the head
        began = clock()
        trainparity.record(1, state)
        seconds = clock() - began
    path.unlink()
    return seconds


def buffered_write(state: dict[str, torch.Tensor], target: Path, flags: int = 0) -> None:
    """One write per tensor of its own memory, O_CREAT|O_TRUNC plus `flags` (e.g. O_DIRECT)."""
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | flags)
    try:
        for tensor in state.values():
            os.write(descriptor, memoryview(tensor.numpy()).cast("B"))
    finally:
        os.close(descriptor)
    target.unlink()


def page_aligned_like(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state copied into anonymous mappings (page-aligned, sizes in whole pages): O_DIRECT's terms."""
    import mmap

    aligned = {}
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        buffer = mmap.mmap(-1, -(-nbytes // mmap.PAGESIZE) * mmap.PAGESIZE)
        copy = torch.frombuffer(buffer, dtype=torch.uint8)
        copy[:nbytes].copy_(tensor.view(torch.uint8).reshape(-1))
        aligned[name] = copy
    return aligned


def write_paths(state: dict[str, torch.Tensor], work: Path, repeats: int, fresh) -> None:
    """Full mode's write path against a plain write, a mapped state, and O_DIRECT.

    CPU time of the process (user and system: the kernel's copy is system
    time), which the other processes of a loaded machine disturb less than
    wall time; O_DIRECT's cost is waiting for the device, so it is wall time.
    """
    cpu = time.process_time

    def middle(times: list[float]) -> float:
        return sorted(times)[len(times) // 2]

    full = middle([recorded(state, "full", fresh(), clock=cpu) for _ in range(repeats)])
    plain = median_seconds(lambda: buffered_write(state, work / "plain"), repeats, clock=cpu)
    print("write paths, CPU time:")
    print(
        f"full record() / one write of the same bytes: {full / plain:.2f}  "
        f"(record {full * 1e3:.1f} ms, write {plain * 1e3:.1f} ms)"
    )
    checkpoint = work / "mapped.pt"
    torch.save(state, checkpoint)

    def mapped_write() -> float:  # a fresh mapping each time: its pages not yet in this process
        mapped_state = torch.load(checkpoint, weights_only=True, mmap=True)
        began = cpu()
        buffered_write(mapped_state, work / "plain")
        return cpu() - began

    def mapped_record() -> float:
        return recorded(
            torch.load(checkpoint, weights_only=True, mmap=True), "full", fresh(), clock=cpu
        )

    written = middle([mapped_write() for _ in range(repeats)])
    copied = middle([mapped_record() for _ in range(repeats)])
    print(
        f"full record() of an mmap-loaded state (copy_file_range) / writing its memory: "
        f"{copied / written:.2f}  (record {copied * 1e3:.1f} ms, write {written * 1e3:.1f} ms)"
    )
    checkpoint.unlink()
    aligned = page_aligned_like(state)
    buffered = median_seconds(lambda: buffered_write(aligned, work / "buffered"), repeats)
    try:
        direct = median_seconds(
            lambda: buffered_write(aligned, work / "direct", os.O_DIRECT), repeats
        )
    except (OSError, AttributeError) as error:
        print(f"O_DIRECT: not available here ({error})")
    else:
        print(
            f"O_DIRECT works here; direct / buffered write (wall): {direct / buffered:.2f}  "
            f"(direct {direct * 1e3:.1f} ms, buffered {buffered * 1e3:.1f} ms)"
        )


def bytes_per_tensor(work: Path) -> float:
    tensors = {f"t{index}": torch.randn(256) for index in range(1000)}
    with recording_to(work / "bytes", mode="summary") as path:
        trainparity.record(0, tensors)
        first = path.stat().st_size
        for step in range(1, 11):
            trainparity.record(step, tensors)
    return (path.stat().st_size - first) / (10 * len(tensors))


def resume_quickstart_seconds(record: bool) -> float:
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    environment["TRAINPARITY_QUICKSTART_RECORD"] = "1" if record else "0"
    began = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainparity.quickstarts.resume"],
        env=environment,
        capture_output=True,
        check=True,
    )
    return time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--skip-quickstart", action="store_true")
    parser.add_argument("--skip-write-paths", action="store_true")
    arguments = parser.parse_args()
    state = state_of(arguments.megabytes)
    with tempfile.TemporaryDirectory(prefix="bench-record-") as work_text:
        work = Path(work_text)
        counter = iter(range(1 << 30))

        def fresh() -> Path:
            return work / f"run{next(counter)}"

        digest = median_seconds(lambda: digest_only(state), repeats=arguments.repeats)
        summary = sorted(recorded(state, "summary", fresh()) for _ in range(arguments.repeats))[
            arguments.repeats // 2
        ]
        # CPU time of all threads: what a loaded machine's other processes disturb least.
        digest_cpu = median_seconds(
            lambda: digest_only(state), repeats=arguments.repeats, clock=time.process_time
        )
        summary_cpu = sorted(
            recorded(state, "summary", fresh(), clock=time.process_time)
            for _ in range(arguments.repeats)
        )[arguments.repeats // 2]
        full = sorted(recorded(state, "full", fresh()) for _ in range(arguments.repeats))[
            arguments.repeats // 2
        ]
        saved = median_seconds(
            lambda: torch.save(state, work / "state.pt"), repeats=arguments.repeats
        )
        per_tensor = bytes_per_tensor(work)
        if not arguments.skip_write_paths:
            write_paths(state, work, arguments.repeats, fresh)
    print(f"state: {arguments.megabytes} MiB float32 in 16 tensors; medians of {arguments.repeats}")
    print(
        f"summary record() speed / digest speed: {digest / summary:.2f}  (target >= 0.8; "
        f"record {summary * 1e3:.1f} ms, digest {digest * 1e3:.1f} ms)"
    )
    print(
        f"  the same in CPU time:                {digest_cpu / summary_cpu:.2f}  "
        f"(record {summary_cpu * 1e3:.1f} ms, digest {digest_cpu * 1e3:.1f} ms)"
    )
    print(
        f"full record() time / torch.save time:  {full / saved:.2f}  (target <= 1.2; "
        f"record {full * 1e3:.1f} ms, torch.save {saved * 1e3:.1f} ms)"
    )
    print(f"summary bytes per tensor per step:     {per_tensor:.1f}  (target <= 128)")
    if not arguments.skip_quickstart:
        runs = [
            (resume_quickstart_seconds(True), resume_quickstart_seconds(False)) for _ in range(3)
        ]
        with_record = sorted(run[0] for run in runs)[1]
        without = sorted(run[1] for run in runs)[1]
        print(
            f"resume quickstart with / without record(): {with_record / without:.2f}  "
            f"(target <= 1.1; {with_record:.1f} s vs {without:.1f} s)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
