"""Single-bit flips of real recording and trace files: the files, their regions, and each flip's outcome.

Shared by the exhaustive bit-flip fuzzer (test_fuzz_bit_flips.py) and the
census `python -m tests.fuzz.bit_flips`, which flips every bit of both files
and counts the outcomes by region (docs/validation.md has its numbers).
Regions are found by walking the files' documented layouts here, not with
the readers under test.
"""

from __future__ import annotations

import argparse
import collections
import json
import struct
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from trainparity import trace
from trainparity._internal.native.cuda import digest_buffer
from trainparity._internal.recording.diff import diff_recordings
from trainparity._internal.recording.frames import RecordingError
from trainparity._internal.recording.recorder import record, recording_to
from trainparity._internal.state.snapshot_file import SnapshotFileError
from trainparity._internal.why.forensics.trace_diff import diff_traces
from trainparity._internal.why.forensics.trace_file import read_trace

RECORDED_STEPS = (1, 2, 3, 4)
# The 24-byte frame header's fields by byte range (docs/design.md, "Recordings").
HEADER_FIELDS = (
    ("magic", 0, 4),
    ("kind", 4, 5),
    ("digest version", 5, 6),
    ("frame version + zero byte", 6, 8),
    ("meta length", 8, 12),
    ("header checksum", 12, 16),
    ("data length", 16, 24),
)
HEADER_BYTES = 24
TRAILER_BYTES = 16


def _model(lr: float = 0.1) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9), torch.randn(8, 4)


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor) -> None:
    optimizer.zero_grad()
    model(batch).pow(2).mean().backward()
    optimizer.step()


def write_recording(
    directory: Path,
    mode: str = "summary",
    *,
    steps: tuple[int, ...] = RECORDED_STEPS,
    lr: float = 0.1,
) -> Path:
    """A tiny model trained up to the last of `steps` by the real `record()`, recording `steps`.

    Returns the rank file. Fewer steps than RECORDED_STEPS stand for a
    resumed run (from its split step on) or one killed early.
    """
    model, optimizer, batch = _model(lr)
    with recording_to(directory, mode=mode) as rank_file:
        for step in range(1, max(steps) + 1):
            _step(model, optimizer, batch)
            if step in steps:
                record(step, {"model": model.state_dict(), "step": step, "lr": lr})
    return Path(rank_file)


def write_trace(path: Path) -> Path:
    """A trace of one training step of the same tiny model, by the real `trace()`."""
    model, optimizer, batch = _model()
    trace(path, model=model, inputs={"batch": batch}, run=lambda: _step(model, optimizer, batch))
    return path


@dataclass(frozen=True)
class Region:
    """A byte range of a file: `frame` names the frame ("" outside frames), `part` what it holds."""

    frame: str
    part: str
    start: int
    end: int
    frame_start: int = 0  # where the frame holding the range starts

    def bits(self) -> range:
        return range(8 * self.start, 8 * self.end)


def padded(length: int) -> int:
    return length + (-length % 8)


def _frames(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(start, meta end, trailer start) of each frame, walked by the header's length fields."""
    offset = 0
    while offset < len(data):
        (meta_length,) = struct.unpack_from("<I", data, offset + 8)
        (data_length,) = struct.unpack_from("<Q", data, offset + 16)
        meta_end = offset + HEADER_BYTES + padded(meta_length)
        trailer_start = meta_end + padded(data_length)
        yield offset, meta_end, trailer_start
        offset = trailer_start + TRAILER_BYTES
    assert offset == len(data), "the frames do not tile the file"


def recording_regions(data: bytes) -> list[Region]:
    """Every frame's header fields, meta, data and trailer; step frames are S1, S2, ..."""
    regions = []
    steps = 0
    for offset, meta_end, trailer_start in _frames(data):
        kind = data[offset + 4 : offset + 5].decode()
        steps += kind == "S"
        frame = f"{kind}{steps}" if kind == "S" else kind
        regions += [
            Region(frame, f"header: {name}", offset + start, offset + end, offset)
            for name, start, end in HEADER_FIELDS
        ]
        regions.append(Region(frame, "meta", offset + HEADER_BYTES, meta_end, offset))
        if trailer_start > meta_end:
            regions.append(Region(frame, "data", meta_end, trailer_start, offset))
        trailer_end = trailer_start + TRAILER_BYTES
        regions.append(Region(frame, "trailer", trailer_start, trailer_end, offset))
    return regions


def as_frame_version_0(data: bytes) -> bytes:
    """The same recording as written before frame headers had a checksum: those bytes zero, trailers redone."""
    older = bytearray()
    for offset, meta_end, trailer_start in _frames(data):
        header = bytearray(data[offset : offset + HEADER_BYTES])
        header[6] = 0
        header[12:16] = bytes(4)
        covered = bytes(header) + data[offset + HEADER_BYTES : meta_end]
        older += covered + data[meta_end:trailer_start]
        older += digest_buffer(covered, version=header[5])[0]
    return bytes(older)


def trace_regions(data: bytes) -> list[Region]:
    """A trace (snapshot layout): length prefix, JSON header around the manifest, manifest, tensor bytes."""
    (length,) = struct.unpack_from("<Q", data)
    header_end = 8 + length
    manifest = json.loads(data[8:header_end])["__metadata__"]["trainparity"]
    quoted = json.dumps(manifest).encode()
    start = data.index(quoted, 8, header_end)
    end = start + len(quoted)
    return [
        Region("", "length prefix", 0, 8),
        Region("", "header: JSON around the manifest", 8, start),
        Region("", "header: manifest (a JSON string)", start, end),
        Region("", "header: JSON around the manifest", end, header_end),
        Region("", "tensor bytes", header_end, len(data)),
    ]


def flipped(data: bytes, bit: int) -> bytes:
    index = bit // 8
    return data[:index] + bytes([data[index] ^ (1 << (bit % 8))]) + data[index + 1 :]


def recording_outcome(seed: Path, mutant: Path) -> str:
    """`diff_recordings(seed, mutant)` as one word: ERROR (RecordingError), else the verdict.

    A verdict over fewer steps than were written says so: "PASS, 3 of 4 steps".
    """
    try:
        result = diff_recordings(seed, mutant)
    except RecordingError:
        return "ERROR"
    compared = len(result.compared_steps)
    verdict = result.outcome.value
    return verdict if compared == len(RECORDED_STEPS) else f"{verdict}, {compared} of 4 steps"


def trace_outcome(seed: Path, mutant: Path) -> str:
    """`diff_traces(seed, mutant)`'s verdict; read_trace first, since an unreadable trace is ERROR."""
    try:
        read_trace(mutant)
    except SnapshotFileError:
        return "ERROR"
    return diff_traces(seed, mutant).outcome.value


def mutants(seed: Path, workspace: Path, bits: Iterator[int]) -> Iterator[tuple[int, Path]]:
    """(bit, a fresh file holding `seed` with that bit flipped) for each bit; each file removed after use.

    A fresh name each time: a memory-mapped file is never rewritten in place.
    """
    data = seed.read_bytes()
    for bit in bits:
        mutant = workspace / f"flip-{bit}{seed.suffix}"
        mutant.write_bytes(flipped(data, bit))
        try:
            yield bit, mutant
        finally:
            mutant.unlink()


def census(seed: Path, regions: list[Region], outcome, workspace: Path) -> dict:
    """Outcome counts per region part (frames pooled): {part: Counter(outcome)}."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for region in regions:
        for _, mutant in mutants(seed, workspace, iter(region.bits())):
            counts[region.part][outcome(seed, mutant)] += 1
    return counts


def _print_counts(title: str, counts: dict, seconds: float) -> None:
    total = sum(sum(counter.values()) for counter in counts.values())
    print(f"{title}: {total} single-bit flips in {seconds:.1f} s")
    for part, counter in counts.items():
        outcomes = ", ".join(f"{name} {count}" for name, count in sorted(counter.items()))
        print(f"  {part:<36} {sum(counter.values()):>6}  {outcomes}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", default="summary", choices=("summary", "full"))
    parser.add_argument(
        "--frame-version", type=int, default=1, choices=(0, 1), help="0: an older recording"
    )
    parser.add_argument("--skip-trace", action="store_true")
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bit-flips-") as root:
        workspace = Path(root)
        seed = write_recording(workspace / "recording", arguments.mode)
        if arguments.frame_version == 0:
            seed.write_bytes(as_frame_version_0(seed.read_bytes()))
        started = time.perf_counter()
        regions = recording_regions(seed.read_bytes())
        counts = census(seed, regions, recording_outcome, workspace)
        _print_counts(
            f"recording ({arguments.mode}, 4 steps, frame version {arguments.frame_version}, "
            f"{seed.stat().st_size} bytes)",
            counts,
            time.perf_counter() - started,
        )
        if not arguments.skip_trace:
            trace_seed = write_trace(workspace / "step.trace")
            started = time.perf_counter()
            counts = census(
                trace_seed, trace_regions(trace_seed.read_bytes()), trace_outcome, workspace
            )
            _print_counts(
                f"trace ({trace_seed.stat().st_size} bytes)", counts, time.perf_counter() - started
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
