"""Snapshot files: safetensors layout, exact round trip, mmap reads, digest-only files, corruption."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import struct

import pytest
import torch
from safetensors import safe_open
from trainparity import ExactComparison, Outcome, ToleranceComparison
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.state.freeze import FrozenTensor, UnsupportedStateError, freeze
from trainparity._internal.state.snapshot_file import (
    SnapshotFileError,
    decode_tree,
    encode_tree,
    read_snapshot,
    write_snapshot,
)

from tests.helpers import set_manifest


def _observation() -> dict:
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    return {
        "model": {"weight": base, "weight_t": base.t(), "row": base[1]},
        "special": torch.tensor([math.nan, math.inf, -math.inf, -0.0, 1e-45]),
        "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "flags": torch.tensor([True, False, True]),
        "complex": torch.tensor([1 + 2j, -0.0 - 1j], dtype=torch.complex128),
        "scalar": torch.tensor(7, dtype=torch.int64),
        "empty": torch.empty((0, 3)),
        "grad": torch.ones(2, requires_grad=True),
        "python": {
            "none": None,
            "flag": True,
            "big": 2**80,
            "neg_zero": -0.0,
            "nan": math.nan,
            "inf": math.inf,
            "text": "héllo",
            "raw": b"\x00\xff",
            "seq": [1, (2.5, "x"), []],
            "empty_map": {},
        },
        "rng": list(range(700)),
    }


def test_encode_tree_is_json_and_decode_tree_inverts_it():
    frozen = freeze(_observation())
    tree, tensors = encode_tree(frozen)
    assert json.loads(json.dumps(tree)) == tree  # plain JSON, NaN and big ints included
    assert tensors[0][0] == "bf16" and ["t", 0] in [item[1] for item in tree[1]]
    back = decode_tree(tree, [tensor for _, tensor in tensors])
    assert ExactComparison().compare_all(frozen, back) == ()
    assert encode_tree(freeze({"x": (1, [None])}))[0] == [
        "m", [["x", ["u", [["i", "1"], ["l", [["n"]]]]]]]
    ]  # fmt: skip
    with pytest.raises(SnapshotFileError, match="unknown node kind 'z'"):
        decode_tree(["z"], [])
    with pytest.raises(SnapshotFileError, match="not sorted"):
        decode_tree(["m", [["b", ["n"]], ["a", ["n"]]]], [])


def test_round_trip_is_exact(tmp_path):
    observation = _observation()
    info = write_snapshot(tmp_path / "s.safetensors", observation, step=4)
    assert info.file_bytes == (tmp_path / "s.safetensors").stat().st_size
    snapshot, extras = read_snapshot(tmp_path / "s.safetensors")
    assert snapshot.step == 4 and snapshot.backend == "full_value_reference"
    assert extras["includes_values"] is True
    expected = freeze(observation)
    assert ExactComparison().compare_all(expected, snapshot.state) == ()
    python = snapshot.state.as_dict()["python"].as_dict()
    assert math.copysign(1.0, python["neg_zero"]) == -1.0
    assert python["big"] == 2**80 and python["raw"] == b"\x00\xff"


def test_every_file_records_an_environment_by_default_this_processs(tmp_path):
    write_snapshot(tmp_path / "default.safetensors", {"x": torch.ones(2)})
    given = {"fingerprint_version": 1, "variables": {"OMP_NUM_THREADS": "7"}}
    write_snapshot(tmp_path / "given.safetensors", {"x": torch.ones(2)}, environment=given)
    assert read_snapshot(tmp_path / "default.safetensors")[1]["environment"] == (
        environment_fingerprint()
    )
    assert read_snapshot(tmp_path / "given.safetensors")[1]["environment"] == given


def test_nan_payload_and_signed_zero_survive_in_tensors(tmp_path):
    payload = torch.tensor([0x7FC00001, -(2**31)], dtype=torch.int32).view(torch.float32)
    write_snapshot(tmp_path / "s", {"x": payload})
    snapshot, _ = read_snapshot(tmp_path / "s")
    restored = snapshot.state.as_dict()["x"].to_tensor()
    assert restored.view(torch.int32).tolist() == [0x7FC00001, -(2**31)]


def test_opens_with_the_safetensors_package(tmp_path):
    observation = {
        "w": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "c": torch.ones(2, dtype=torch.complex128),
    }
    write_snapshot(tmp_path / "s.safetensors", observation, step=1)
    with safe_open(str(tmp_path / "s.safetensors"), framework="pt") as handle:
        assert sorted(handle.keys()) == ["c", "w"]
        assert torch.equal(handle.get_tensor("w"), observation["w"])
        manifest = json.loads(handle.metadata()["trainparity"])
    assert manifest["step"] == 1
    assert {entry["name"]: entry["dtype"] for entry in manifest["tensors"]} == {
        "c": "torch.complex128",
        "w": "torch.float32",
    }


def test_reads_are_memory_mapped_views(tmp_path):
    write_snapshot(tmp_path / "s", {"w": torch.ones(1024)})
    snapshot, _ = read_snapshot(tmp_path / "s")
    leaf = snapshot.state.as_dict()["w"]
    assert isinstance(leaf.data, memoryview)
    assert leaf.data.readonly
    assert leaf.digest is not None and len(leaf.digest) == 16


def test_snapshots_compare_like_frozen_states(tmp_path):
    write_snapshot(tmp_path / "a", {"w": torch.tensor([1.0, 2.0]), "n": 1}, step=2)
    write_snapshot(tmp_path / "b", {"w": torch.tensor([1.0, 3.0]), "n": 1}, step=2)
    left, _ = read_snapshot(tmp_path / "a")
    right, _ = read_snapshot(tmp_path / "b")
    difference = ExactComparison().compare(left, right).first_difference
    assert (difference.path, difference.reason) == ("w", "tensor_value")
    assert (difference.max_abs_error, difference.max_rel_error) == (1.0, 0.5)
    same, _ = read_snapshot(tmp_path / "a")
    assert ExactComparison().compare(left, same).outcome is Outcome.PASS


def test_equal_digests_still_honour_nan_rules_under_tolerance(tmp_path):
    write_snapshot(tmp_path / "a", {"x": torch.tensor([math.nan])})
    write_snapshot(tmp_path / "b", {"x": torch.tensor([math.nan])})
    left, _ = read_snapshot(tmp_path / "a")
    right, _ = read_snapshot(tmp_path / "b")
    assert ExactComparison().compare(left, right).outcome is Outcome.PASS
    assert ToleranceComparison(rtol=0, atol=0).compare(left, right).outcome is Outcome.FAIL
    assert (
        ToleranceComparison(rtol=0, atol=0, equal_nan=True).compare(left, right).outcome
        is Outcome.PASS
    )


def test_digest_only_snapshots_say_which_tensor_differs(tmp_path):
    write_snapshot(
        tmp_path / "a", {"w": torch.ones(100_000), "v": torch.zeros(3)}, include_values=False
    )
    write_snapshot(
        tmp_path / "b", {"w": torch.ones(100_000), "v": torch.ones(3)}, include_values=False
    )
    assert (tmp_path / "a").stat().st_size < 4096
    left, extras = read_snapshot(tmp_path / "a")
    right, _ = read_snapshot(tmp_path / "b")
    assert extras["includes_values"] is False
    differences = ExactComparison().compare_all(left, right)
    assert [(d.path, d.reason) for d in differences] == [("v", "tensor_value")]
    assert differences[0].max_abs_error is None


def test_unsupported_values_are_rejected_before_writing(tmp_path):
    with pytest.raises(UnsupportedStateError, match="unsupported state at model.bad"):
        write_snapshot(tmp_path / "s", {"model": {"bad": object()}})
    assert not (tmp_path / "s").exists()


def _valid_file(tmp_path):
    path = tmp_path / "s"
    write_snapshot(path, {"w": torch.arange(64, dtype=torch.float32), "k": [1, 2]})
    return path


@pytest.mark.parametrize("keep", [0, 3, 8, 20, -1, -100])
def test_truncated_files_are_clear_errors(tmp_path, keep):
    path = _valid_file(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[: len(data) + keep])
    with pytest.raises(SnapshotFileError, match="record it again"):
        read_snapshot(path)


def test_corrupted_headers_are_clear_errors(tmp_path):
    path = _valid_file(tmp_path)
    data = bytearray(path.read_bytes())
    (header_length,) = struct.unpack_from("<Q", data)
    for position in range(8, 8 + header_length, max(1, header_length // 40)):
        corrupted = bytearray(data)
        corrupted[position] = ord("}") if corrupted[position] != ord("}") else ord("{")
        path.write_bytes(bytes(corrupted))
        with contextlib.suppress(SnapshotFileError):  # the only acceptable failure
            read_snapshot(path)


def _with_manifest(path, change):
    """Rewrite the manifest and sign it again: a well-formed file from a faulty writer."""
    data = path.read_bytes()
    (header_length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + header_length])
    manifest = json.loads(header["__metadata__"]["trainparity"])
    change(manifest)
    set_manifest(header["__metadata__"], json.dumps(manifest))
    encoded = json.dumps(header).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + header_length :])


@pytest.mark.parametrize(
    "change, detail",
    [
        # a float node whose hex is not 8 bytes raised struct.error
        (lambda m: m["tree"][1].append(["f", ["f", "00"]]), "manifest is malformed (error: "),
        # an environment that is not a mapping raised AttributeError in diff_snapshots
        (lambda m: m.update(environment=[1, 2]), "manifest environment is not a mapping"),
    ],
)
def test_malformed_manifest_values_are_clear_errors(tmp_path, change, detail):
    from trainparity._internal.comparison.snapshots import diff_snapshots

    path = _valid_file(tmp_path)
    _with_manifest(path, change)
    with pytest.raises(SnapshotFileError, match=re.escape(detail)):
        read_snapshot(path)
    result = diff_snapshots(path, path)
    assert result.outcome is Outcome.ERROR and detail in result.message


def test_a_fifo_is_rejected_instead_of_blocking_forever(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # no writer: opening it for reading would never return
    with pytest.raises(SnapshotFileError, match="is a FIFO, not a regular file"):
        read_snapshot(tmp_path / "pipe")


def test_foreign_safetensors_file_is_rejected(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.ones(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(SnapshotFileError, match="not a trainparity snapshot"):
        read_snapshot(tmp_path / "foreign.safetensors")


def test_frozen_tensors_from_memory_and_file_agree(tmp_path):
    tensor = torch.randn(5, 7, dtype=torch.float64)
    write_snapshot(tmp_path / "s", {"t": tensor})
    snapshot, _ = read_snapshot(tmp_path / "s")
    assert torch.equal(
        snapshot.state.as_dict()["t"].to_tensor(), FrozenTensor.capture(tensor).to_tensor()
    )
