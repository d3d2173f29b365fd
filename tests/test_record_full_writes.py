"""record()'s full mode: writev of the tensors' own memory, copy_file_range for mapped tensors.

Real files, real torch.load(mmap=True) tensors, real recordings read back by
the recording reader; the bytes on disk are checked against the old layout
(each value followed by zeros to a multiple of 8).
"""

from __future__ import annotations

import os

import pytest
import torch
import trainparity
from trainparity import ExactComparison
from trainparity._internal.recording import read_recording, recording_to
from trainparity._internal.recording.value_writes import write_values
from trainparity._internal.state.file_ranges import FileRange, MappedFileLocator
from trainparity._internal.state.freeze import freeze
from trainparity._internal.state.normalize import normalize_observation


def _padded(data: bytes) -> bytes:
    return data + bytes(-len(data) % 8)


def test_many_values_of_odd_sizes_land_as_the_padded_concatenation(tmp_path):
    """More values than one writev takes (IOV_MAX), empty and odd-sized ones among them."""
    generator = torch.Generator().manual_seed(3)
    values = [
        torch.randint(0, 256, (size,), dtype=torch.uint8, generator=generator).numpy().tobytes()
        for size in [0, 1, 7, 8, 9, 1 << 20, 3] + [13] * 1500
    ]
    target = tmp_path / "values"
    with open(target, "wb") as stream:
        stream.write(b"head")  # buffered, not yet flushed: it must land first
        write_values(stream, [(memoryview(value), None) for value in values])
        stream.write(b"tail")
    assert target.read_bytes() == b"head" + b"".join(map(_padded, values)) + b"tail"


@pytest.mark.skipif(not hasattr(os, "copy_file_range"), reason="no os.copy_file_range")
def test_a_value_with_an_unwritten_file_source_is_copied_from_the_file(tmp_path):
    """The file's bytes, not the memory's, reach the output: the copy went file to file.
    (write_values trusts `unwritten`, which file_ranges.py establishes from the page map.)"""
    source = tmp_path / "source"
    source.write_bytes(bytes(range(256)) * 64)
    memory = bytes(1000)  # differs from the file on purpose
    target = tmp_path / "values"
    with open(target, "wb") as stream:
        write_values(
            stream,
            [
                (memoryview(memory), FileRange(str(source), 100, unwritten=True)),
                (memoryview(memory), FileRange(str(source), 100, unwritten=False)),
            ],
        )
    assert target.read_bytes() == _padded(source.read_bytes()[100:1100]) + _padded(memory)


def test_a_source_file_shorter_than_the_value_falls_back_to_the_memory(tmp_path):
    source = tmp_path / "source"
    source.write_bytes(b"x" * 10)
    memory = b"m" * 30
    target = tmp_path / "values"
    with open(target, "wb") as stream:
        write_values(stream, [(memoryview(memory), FileRange(str(source), 4, unwritten=True))])
    # Whatever the kernel copied (the file's 6 bytes) is followed by the memory's rest.
    written = target.read_bytes()
    assert len(written) == 32 and written[30:] == b"\0\0"
    assert written[:30] in (b"x" * 6 + b"m" * 24, memory)


def test_full_recording_of_a_mapped_checkpoint_reads_back_equal(tmp_path):
    """Tensors straight from torch.load(mmap=True) (copied by the kernel), one changed after
    loading (its page left the file: its memory is written) and one built in memory."""
    checkpoint = tmp_path / "checkpoint.pt"
    generator = torch.Generator().manual_seed(5)
    torch.save(
        {f"w{index}": torch.randn(257, 33, generator=generator) for index in range(4)}, checkpoint
    )
    state = torch.load(checkpoint, weights_only=True, mmap=True)
    locator = MappedFileLocator.of_mapped_files()
    sources = [locator.locate(tensor) for tensor in state.values()]
    assert all(source is not None and source.path == str(checkpoint) for source in sources)
    if os.access("/proc/self/pagemap", os.R_OK):  # unwritten: the kernel copies them
        assert all(source.unwritten for source in sources)
    state["w1"].mul_(2.0)
    state["built"] = torch.arange(11, dtype=torch.int16)
    expected = []
    with recording_to(tmp_path / "recording", mode="full"):
        trainparity.record(1, state)
        expected.append(freeze(normalize_observation(state)))
        state["w2"].add_(1.0)  # the next step's values differ
        trainparity.record(2, state)
        expected.append(freeze(normalize_observation(state)))
    recording = read_recording(tmp_path / "recording")
    assert [step.full for step in recording.steps] == [True, True]
    for recorded, wanted in zip(recording.steps, expected, strict=True):
        assert ExactComparison().compare_all(recorded.state, wanted) == ()
