"""Verified reads: a snapshot file whose bytes changed after it was written is an ERROR, never a verdict."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from trainparity import Outcome
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.state.snapshot_file import (
    SnapshotFileError,
    read_snapshot,
    write_snapshot,
)

from tests.cli_here import CLI, completed_here
from tests.helpers import rewrite_as_digest_version_1

# Each example writes one small file; 400 flips run in a few seconds.
_FLIPS = settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _training_state() -> dict:
    """What `trainparity snapshot` records of a checkpoint: weights of several dtypes and plain values."""
    generator = torch.Generator().manual_seed(3)
    return {
        "model": {
            "w": torch.randn(16, 8, generator=generator),
            "b": torch.randn(8, generator=generator, dtype=torch.float64),
            "h": torch.randn(33, generator=generator).to(torch.bfloat16),
            "mask": torch.arange(21) % 3 == 0,
        },
        "optimizer": {"state": {"0": {"step": torch.tensor(4.0)}}, "lr": 0.1},
        "scheduler": {"last_epoch": 4},
        "rng": torch.randint(0, 255, (40,), generator=generator, dtype=torch.uint8),
    }


@pytest.fixture(scope="module")
def intact(tmp_path_factory):
    path = tmp_path_factory.mktemp("intact") / "intact.safetensors"
    write_snapshot(path, _training_state(), step=4)
    data = path.read_bytes()
    (header_length,) = struct.unpack_from("<Q", data)
    return path, data, 8 + header_length


def _flipped(directory, data: bytes, position: int, bit: int):
    damaged = bytearray(data)
    damaged[position] ^= 1 << bit
    path = directory / "damaged.safetensors"
    path.write_bytes(bytes(damaged))
    return path


@_FLIPS
@given(fraction=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_a_bit_flipped_in_tensor_data_is_never_a_pass(intact, tmp_path, fraction, bit):
    path, data, data_start = intact
    position = data_start + int(fraction * (len(data) - data_start))
    damaged = _flipped(tmp_path, data, position, bit)
    for baseline, candidate in ((path, damaged), (damaged, path)):
        result = diff_snapshots(baseline, candidate)
        assert result.outcome is Outcome.ERROR, (position, bit, result.message)
        assert f"snapshot file {damaged} is damaged: tensor " in result.message
        assert "does not match its recorded digest" in result.message


@_FLIPS
@given(fraction=st.floats(0, 1, exclude_max=True), bit=st.integers(0, 7))
def test_a_bit_flipped_anywhere_in_the_file_is_an_error(intact, tmp_path, fraction, bit):
    path, data, _ = intact
    position = int(fraction * len(data))
    damaged = _flipped(tmp_path, data, position, bit)
    with pytest.raises(SnapshotFileError, match=f"snapshot file {damaged} is (damaged|unreadable)"):
        read_snapshot(damaged)
    assert diff_snapshots(path, damaged).outcome is Outcome.ERROR


def test_damage_names_the_tensor(intact, tmp_path):
    path, data, data_start = intact
    damaged = _flipped(tmp_path, data, data_start, 0)  # first byte of the first tensor written
    with pytest.raises(SnapshotFileError) as raised:
        read_snapshot(damaged)
    assert str(raised.value).startswith(
        f"snapshot file {damaged} is damaged: tensor model.b does not match its recorded digest"
    )


def test_a_hand_edited_manifest_value_is_damage(intact, tmp_path):
    path, data, _ = intact
    edited = data.replace(
        b'\\"last_epoch\\", [\\"i\\", \\"4\\"]', b'\\"last_epoch\\", [\\"i\\", \\"5\\"]'
    )
    assert edited != data
    damaged = tmp_path / "edited.safetensors"
    damaged.write_bytes(edited)
    with pytest.raises(SnapshotFileError, match="is damaged: its manifest does not match"):
        read_snapshot(damaged)


def test_trusted_digests_skip_the_check_and_the_report_says_so(intact, tmp_path):
    path, data, data_start = intact
    damaged = _flipped(tmp_path, data, data_start + 3, 6)
    result = diff_snapshots(path, damaged, trust_digests=True)
    # Equal recorded digests are taken at their word: the damage goes unseen, as asked.
    assert result.outcome is Outcome.PASS
    assert result.integrity == "digests trusted"
    assert result.to_dict()["integrity"] == "digests trusted"
    assert diff_snapshots(path, path).integrity == "verified"
    snapshot, extras = read_snapshot(damaged, trust_digests=True)
    assert extras["tensors_verified"] is False and extras["manifest_verified"] is True


def test_a_version_one_file_without_a_manifest_digest_still_reads(intact, tmp_path):
    """Files written before the manifest digest existed (digest version 1) read, marked unverified."""
    path, data, _ = intact
    old = tmp_path / "old.safetensors"
    old.write_bytes(data)
    rewrite_as_digest_version_1(old, manifest_digest=False)
    snapshot, extras = read_snapshot(old)
    assert extras["digest_version"] == 1
    assert extras["manifest_verified"] is False and extras["tensors_verified"] is True
    assert diff_snapshots(path, old).outcome is Outcome.PASS


def test_version_one_and_two_files_are_both_verified(intact, tmp_path):
    """A version 1 file with its manifest digest reads verified; damage to it is still found."""
    path, data, _ = intact
    old = tmp_path / "old.safetensors"
    old.write_bytes(data)
    rewrite_as_digest_version_1(old)
    snapshot, extras = read_snapshot(old)
    assert (extras["digest_version"], read_snapshot(path)[1]["digest_version"]) == (1, 2)
    assert extras["manifest_verified"] is True and extras["tensors_verified"] is True
    assert diff_snapshots(path, old).outcome is Outcome.PASS
    damaged = bytearray(old.read_bytes())
    damaged[-1] ^= 1
    old.write_bytes(bytes(damaged))
    with pytest.raises(SnapshotFileError):
        read_snapshot(old)


def test_cli_diff_of_a_damaged_file_exits_3_and_trust_is_reported(intact, tmp_path):
    path, data, data_start = intact
    damaged = _flipped(tmp_path, data, data_start + 100, 1)
    command = [*CLI, "diff", str(path), str(damaged)]  # run in this process: tests/cli_here.py
    verified = completed_here(command)
    assert verified.returncode == 3, verified.stdout + verified.stderr
    assert "is damaged: tensor " in verified.stdout
    trusted = completed_here([*command, "--trust-digests", "--json"])
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert json.loads(trusted.stdout)["integrity"] == "digests trusted"
