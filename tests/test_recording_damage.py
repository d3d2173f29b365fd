"""Damaged recordings: a flipped header bit is an error where it is, never a shorter trajectory that passes."""

from __future__ import annotations

import shutil

import pytest
from trainparity.recording.diff import diff_recordings
from trainparity.recording.frames import RecordingError

from tests.fuzz.bit_flips import flipped, recording_regions, write_recording
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
