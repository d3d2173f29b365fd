"""Damaged recordings: a flipped header bit is an error where it is, never a shorter trajectory that passes."""

from __future__ import annotations

import shutil
import struct
import zlib

import numpy
import pytest
from trainparity._internal.recording.diff import diff_recordings
from trainparity._internal.recording.frames import RecordingError, header_checksum
from trainparity._internal.recording.reader import read_recording, tensor_at
from trainparity.outcomes import Outcome

from tests.fuzz.bit_flips import (
    as_frame_version_0,
    flipped,
    recording_regions,
    write_recording,
)
from tests.fuzz.checks import run_cli


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    """A 4-step summary-mode recording by the real record()."""
    return write_recording(tmp_path_factory.mktemp("seed") / "run")


def _damaged_copy(seed, tmp_path, data):
    directory = tmp_path / "damaged"
    directory.mkdir()
    (directory / seed.name).write_bytes(data)
    return directory


@pytest.mark.parametrize("frame", ["S2", "S4"])
@pytest.mark.parametrize(("field", "bit"), [("meta length", 20), ("data length", 40)])
def test_a_flipped_length_bit_is_an_error_naming_the_frame(seed, tmp_path, frame, field, bit):
    # The finding: this read as PASS over the steps before the frame.
    (region,) = [
        region
        for region in recording_regions(seed.read_bytes())
        if region.frame == frame and region.part == f"header: {field}"
    ]
    damaged = _damaged_copy(seed, tmp_path, flipped(seed.read_bytes(), 8 * region.start + bit))
    frame_start = region.start - (8 if field == "meta length" else 16)
    with pytest.raises(RecordingError, match=f"frame at byte {frame_start} .*checksum"):
        diff_recordings(seed.parent, damaged)
    code, _, err = run_cli(["diff", str(seed.parent), str(damaged)])
    assert code == 3 and "rank-0.tprec" in err
    shutil.rmtree(damaged)


def _region(seed, frame, part):
    (region,) = [
        region
        for region in recording_regions(seed.read_bytes())
        if region.frame == frame and region.part == part
    ]
    return region


def test_each_header_carries_a_crc32_of_its_other_bytes_as_documented(seed):
    data = seed.read_bytes()
    for region in recording_regions(data):
        if region.part == "header: magic":
            header = data[region.start : region.start + 24]
            assert header[6] == 1 and header[7] == 0  # frame version 1, a zero byte
            checksum = struct.unpack_from("<I", header, 12)[0]
            assert checksum == zlib.crc32(header[:12] + header[16:])


@pytest.mark.parametrize(
    ("frame", "detail"),
    [
        ("H", "has frame version 0 \\(no header checksum\\) but non-zero checksum bytes"),
        ("S2", "has frame version 0 in a file of frame version 1"),
    ],
)
def test_a_flipped_version_bit_cannot_pass_a_header_off_as_unchecked(seed, tmp_path, frame, detail):
    region = _region(seed, frame, "header: frame version + zero byte")
    damaged = _damaged_copy(seed, tmp_path, flipped(seed.read_bytes(), 8 * region.start))
    with pytest.raises(RecordingError, match=f"frame at byte {region.frame_start} {detail}"):
        read_recording(damaged)


@pytest.mark.parametrize(
    ("tail", "detail"),
    [
        (b"TPRF", None),  # the start of a header: a writer killed right there
        (b"TPRS", "is not a frame header"),
        (b"TPRFS\x02\x07", "has an unknown frame version 7"),
        (b"TPRFX" + bytes(27), "has an unknown kind"),
    ],
)
def test_bytes_after_the_last_frame_are_a_tail_only_if_they_can_begin_a_header(
    seed, tmp_path, tail, detail
):
    size = len(seed.read_bytes())
    damaged = _damaged_copy(seed, tmp_path, seed.read_bytes() + tail)
    if detail is None:
        recording = read_recording(damaged)
        assert recording.partial_tail and recording.partial_tail_step is None
        assert [step.step for step in recording.steps] == [1, 2, 3, 4]
    else:
        with pytest.raises(RecordingError, match=f"frame at byte {size} {detail}"):
            read_recording(damaged)


def test_unmatched_steps_abstain_unless_common_steps_only_is_asked_for(seed, tmp_path):
    # A resumed run records from its split step on: equal where both recorded, step 1 missing.
    resumed = write_recording(tmp_path / "resumed", steps=(2, 3, 4)).parent
    result = diff_recordings(seed.parent, resumed)
    assert result.outcome is Outcome.ABSTAIN and result.steps_only_in_baseline == (1,)
    assert result.message.startswith(
        "the runs are identical at all 3 compared steps, but step 1 only in baseline: "
        "no verdict on steps one run lacks"
    )
    code, _, _ = run_cli(["diff", str(seed.parent), str(resumed)])
    assert code == 2
    asked = diff_recordings(seed.parent, resumed, common_steps_only=True)
    assert asked.outcome is Outcome.PASS and asked.common_steps_only
    assert asked.message.endswith("(common steps only, as asked; step 1 only in baseline)")
    code, _, _ = run_cli(["diff", str(seed.parent), str(resumed), "--common-steps-only"])
    assert code == 0


def test_runs_that_part_fail_whatever_steps_one_lacks(seed, tmp_path):
    other = write_recording(tmp_path / "other", steps=(1, 2, 3, 4, 5, 6), lr=0.2).parent
    result = diff_recordings(seed.parent, other)
    assert result.outcome is Outcome.FAIL and result.first_divergent_step == 1
    assert result.message.endswith("; steps 5-6 only in candidate")


def test_an_older_recording_reads_and_is_marked_in_the_report(seed, tmp_path):
    older = _damaged_copy(seed, tmp_path, as_frame_version_0(seed.read_bytes()))
    assert read_recording(older).frame_version == 0
    result = diff_recordings(seed.parent, older)
    assert result.outcome is Outcome.PASS
    report = result.to_dict()
    assert report["baseline_file"]["frame_version"] == 1
    assert report["candidate_file"] == {
        "frame_version": 0,
        "partial_tail": False,
        "partial_tail_step": None,
    }
    assert result.message.endswith(
        "; the candidate is an older recording (frame version 0) whose frame headers carry "
        "no checksum"
    )


def test_an_older_recording_with_a_damaged_middle_length_is_an_error(seed, tmp_path):
    # No header checksum there: the complete frames after the damaged one give it away.
    older = as_frame_version_0(seed.read_bytes())
    region = _region(seed, "S2", "header: data length")
    damaged = _damaged_copy(seed, tmp_path, flipped(older, 8 * region.start + 40))
    with pytest.raises(
        RecordingError,
        match=f"frame at byte {region.frame_start} claims to end at byte .* but a complete frame "
        "follows at byte",
    ):
        read_recording(damaged)


def test_nonzero_padding_after_a_stored_tensor_is_damage(tmp_path):
    # model.0.bias is 3 float32 (12 bytes), zero-padded to 16: no digest covers the padding.
    full = write_recording(tmp_path / "full", mode="full")
    bias = tensor_at(read_recording(full).steps[0].state, 'model["0.bias"]')
    data = full.read_bytes()
    padding = data.index(bytes(bias.data)) + bias.nbytes
    assert bias.nbytes == 12 and data[padding : padding + 4] == bytes(4)
    damaged = _damaged_copy(full, tmp_path, flipped(data, 8 * padding + 5))
    with pytest.raises(
        RecordingError, match=r"the padding after tensor model\[\"0.bias\"\] of step 1"
    ):
        read_recording(damaged)


def test_the_header_checksum_detects_every_error_of_up_to_6_bits(seed):
    # CRC-32 is linear: a flip pattern goes unseen exactly when the XOR of its bits'
    # syndromes is 0. Syndromes of all 192 header bits, then every XOR of 1 to 3 of them:
    # all non-zero and distinct means no pattern of 1 to 6 bits is missed.
    header = seed.read_bytes()[:24]
    base = header_checksum(header)
    payload = [
        header_checksum(flipped(header, bit)) ^ base for bit in range(192) if not 96 <= bit < 128
    ]
    syndromes = numpy.array(payload + [1 << bit for bit in range(32)], dtype=numpy.uint32)
    first, second = numpy.triu_indices(192, 1)
    pairs = syndromes[first] ^ syndromes[second]
    triples = (pairs[:, None] ^ syndromes[None, :])[second[:, None] < numpy.arange(192)[None, :]]
    assert len(triples) == 192 * 191 * 190 // 6
    combined = numpy.concatenate([syndromes, pairs, triples])
    assert 0 not in combined and len(numpy.unique(combined)) == len(combined)
