"""Every single-bit flip of a recording's frame headers and of a trace's header: an error, never a PASS.

Exhaustive rather than drawn (bit_flips.py builds the files and their
regions): all 1,152 header bits of a 4-step summary recording (head, layout
and four step frames); the same in an older recording (frame version 0, no
header checksum), where a longer length in the last frame can only read as
a cut-short tail, which the diff reports as ABSTAIN; a cut at every byte of
the recording, as a killed writer leaves it; and every bit of a trace's
length prefix and JSON header around its manifest. The manifest, one JSON
string covered whole by its digest, gets one flip per byte under `make test`
(the bit position rotating) and every bit under `make fuzz`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from trainparity._internal.recording.diff import diff_recordings
from trainparity._internal.recording.frames import RecordingError
from trainparity._internal.recording.reader import read_recording
from trainparity.outcomes import Outcome

from tests.fuzz.bit_flips import (
    RECORDED_STEPS,
    Region,
    as_frame_version_0,
    flipped,
    mutants,
    recording_regions,
    trace_outcome,
    trace_regions,
    write_recording,
    write_trace,
)
from tests.fuzz.budget import LONG_EXAMPLES
from tests.fuzz.checks import run_cli

HEADER_BITS = 6 * 24 * 8  # head, layout and 4 step frames


@dataclass(frozen=True)
class Seeds:
    current: Path  # rank file as record() writes it
    older: Path  # the same recording in frame version 0
    trace: Path


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Seeds:
    directory = tmp_path_factory.mktemp("bit-flip-seeds")
    current = write_recording(directory / "current")
    older = directory / "older" / current.name
    older.parent.mkdir()
    older.write_bytes(as_frame_version_0(current.read_bytes()))
    return Seeds(current, older, write_trace(directory / "step.trace"))


def _header_regions(path: Path) -> list[Region]:
    return [
        region
        for region in recording_regions(path.read_bytes())
        if region.part.startswith("header")
    ]


def _flip_outcome(seed: Path, mutant: Path, region: Region) -> str | None:
    """None when the flip ends as it must: RecordingError naming the file and the frame's offset."""
    try:
        result = diff_recordings(seed, mutant)
    except RecordingError as error:
        named = f"recording {mutant} is damaged: the frame at byte {region.frame_start} "
        return None if named in str(error) else str(error)
    return f"{result.outcome.value}: {result.message}"


def test_every_frame_header_bit_is_an_error_at_its_frame(seeds, tmp_path):
    wrong, flips = [], 0
    for region in _header_regions(seeds.current):
        for bit, mutant in mutants(seeds.current, tmp_path, iter(region.bits())):
            flips += 1
            outcome = _flip_outcome(seeds.current, mutant, region)
            if outcome is not None:
                wrong.append((region.frame, region.part, bit, outcome))
    assert flips == HEADER_BITS
    assert not wrong, f"{len(wrong)} flips not reported as damage at their frame: {wrong[:5]}"


def test_an_older_recording_reads_and_its_header_flips_never_pass(seeds, tmp_path):
    older = read_recording(seeds.older)
    assert older.frame_version == 0
    assert tuple(step.step for step in older.steps) == RECORDED_STEPS
    wrong, tails = [], 0
    for region in _header_regions(seeds.older):
        for bit, mutant in mutants(seeds.older, tmp_path, iter(region.bits())):
            outcome = _flip_outcome(seeds.older, mutant, region)
            if outcome is None:
                continue
            # Without a header checksum, a last frame claiming more bytes than the file
            # holds is what a killed writer leaves: the diff must abstain, never pass.
            if region.frame == "S4" and region.part.endswith("length"):
                result = diff_recordings(seeds.older, mutant)
                if (
                    result.outcome is Outcome.ABSTAIN
                    and result.candidate_file.partial_tail
                    and result.compared_steps == (1, 2, 3)
                ):
                    tails += 1
                    continue
            wrong.append((region.frame, region.part, bit, outcome))
    assert not wrong, f"{len(wrong)} flips neither damage nor an abstaining tail: {wrong[:5]}"
    assert 0 < tails < 96  # only some bits of S4's lengths make it run past the end


def test_a_cut_at_any_byte_leaves_the_steps_before_it_and_a_partial_tail(seeds, tmp_path):
    data = seeds.current.read_bytes()
    frames = [region for region in recording_regions(data) if region.part == "trailer"]
    steps_by_frame = {"S1": 1, "S2": 2, "S3": 3, "S4": 4}
    wrong = []
    for length in range(len(data)):
        cut = tmp_path / f"cut-{length}.tprec"
        cut.write_bytes(data[:length])
        recording = read_recording(cut)
        complete = [
            steps_by_frame[frame.frame]
            for frame in frames
            if frame.end <= length and frame.frame in steps_by_frame
        ]
        inside = next((frame for frame in frames if frame.frame_start < length < frame.end), None)
        # The claimed step is the first 8 bytes after the 24-byte header.
        claimed = (
            steps_by_frame.get(inside.frame)
            if inside is not None and length >= inside.frame_start + 32
            else None
        )
        found = (
            [step.step for step in recording.steps],
            recording.partial_tail,
            recording.partial_tail_step,
        )
        if found != (complete, inside is not None, claimed):
            wrong.append((length, found))
        cut.unlink()
    assert not wrong, f"{len(wrong)} cuts read wrongly: {wrong[:5]}"


def test_a_cut_short_last_step_is_an_abstaining_diff(seeds, tmp_path):
    (last,) = [
        region
        for region in recording_regions(seeds.current.read_bytes())
        if region.frame == "S4" and region.part == "meta"
    ]
    cut = tmp_path / "cut" / seeds.current.name
    cut.parent.mkdir()
    cut.write_bytes(seeds.current.read_bytes()[: last.start + 40])
    result = diff_recordings(seeds.current.parent, cut.parent)
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert result.steps_only_in_baseline == (4,)
    assert "step 4 only in baseline" in result.message
    assert "the candidate ends in its step 4 cut short, as a killed writer" in result.message
    code, out, _ = run_cli(["diff", str(seeds.current.parent), str(cut.parent)])
    assert code == 2 and "ABSTAIN" in out


def test_the_cli_exits_3_for_a_flip_in_each_header_field(seeds, tmp_path):
    data = seeds.current.read_bytes()
    for number, region in enumerate(_header_regions(seeds.current)):
        mutant = tmp_path / f"field-{number}" / seeds.current.name
        mutant.parent.mkdir()
        mutant.write_bytes(flipped(data, 8 * region.start + number % 8))
        code, _, err = run_cli(["diff", str(seeds.current.parent), str(mutant.parent)])
        assert code == 3, (region, err)
        assert f"the frame at byte {region.frame_start} " in err, (region, err)


def _trace_bits(region: Region) -> list[int]:
    if region.part != "header: manifest (a JSON string)" or LONG_EXAMPLES:
        return list(region.bits())
    return [8 * byte + byte % 8 for byte in range(region.start, region.end)]


def test_every_trace_header_bit_is_an_error(seeds, tmp_path):
    regions = [
        region
        for region in trace_regions(seeds.trace.read_bytes())
        if region.part != "tensor bytes"
    ]
    wrong, flips = [], 0
    for region in regions:
        for bit, mutant in mutants(seeds.trace, tmp_path, iter(_trace_bits(region))):
            flips += 1
            outcome = trace_outcome(seeds.trace, mutant)
            if outcome != "ERROR":
                wrong.append((region.part, bit, outcome))
    assert flips > 8 * 1000
    assert not wrong, f"{len(wrong)} flips of the trace header not an error: {wrong[:5]}"
    first = regions[0]
    mutant = tmp_path / "prefix.trace"
    mutant.write_bytes(flipped(seeds.trace.read_bytes(), 8 * first.start + 3))
    code, _, _ = run_cli(["diff", str(seeds.trace), str(mutant)])
    assert code in (3, 4)  # a trace damaged past recognition is no longer a trace: usage error
