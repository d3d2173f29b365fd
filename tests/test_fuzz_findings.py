"""Regressions for what the fuzzers in tests/fuzz found, each as a plain example."""

from __future__ import annotations

import json
import struct

import numpy
import pytest
import torch
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.coverage.audit import NoCrossRankOverlap, audit_rank_arrays
from trainparity._internal.reports.text_views import text_report
from trainparity._internal.state.snapshot_file import (
    SnapshotFileError,
    read_snapshot,
    write_snapshot,
)
from trainparity.outcomes import Outcome

from tests.helpers import set_manifest


def _rewritten(tmp_path, edit_manifest=None, header_text=None, manifest_text=None):
    """A real snapshot file with its manifest (or whole header) replaced."""
    source = tmp_path / "source.safetensors"
    write_snapshot(source, {"a": torch.ones(2), "b": torch.zeros(3), "n": 1})
    data = source.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + length])
    manifest = json.loads(header["__metadata__"]["trainparity"])
    if edit_manifest is not None:
        edit_manifest(manifest)
    set_manifest(header["__metadata__"], manifest_text or json.dumps(manifest))
    encoded = (header_text or json.dumps(header)).encode()
    target = tmp_path / "damaged.safetensors"
    target.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length :])
    return source, target


def _assert_unreadable(path, detail):
    with pytest.raises(SnapshotFileError, match=detail):
        read_snapshot(path)


def test_an_infinite_number_in_the_manifest_is_a_snapshot_error(tmp_path):
    # json.loads reads `Infinity`; int(inf) raised OverflowError out of read_snapshot
    _, damaged = _rewritten(tmp_path, lambda m: m["tensors"][0].update(nbytes=float("inf")))
    _assert_unreadable(damaged, "OverflowError")


@pytest.mark.parametrize("where", ["header", "manifest"])
def test_deeply_nested_json_is_a_snapshot_error(tmp_path, where):
    # RecursionError escaped from json.loads
    deep = "[" * 100_000 + "]" * 100_000
    if where == "header":
        _, damaged = _rewritten(tmp_path, header_text=deep)
    else:
        _, damaged = _rewritten(tmp_path, manifest_text=deep)
    _assert_unreadable(damaged, "RecursionError")


def _at_stack_depth(frames, call):
    return call() if frames == 0 else _at_stack_depth(frames - 1, call)


def test_a_deep_state_tree_reads_or_is_a_snapshot_error_at_any_stack_depth(tmp_path):
    # RecursionError escaped from the tree decoder when the JSON decoder just managed
    def nest(manifest):
        manifest["tree"] = "@"

    levels = 450
    nested = '["m", [["d", ' + '["l", [' * levels + '["n"]' + "]]" * levels + "]]]"
    _, plain = _rewritten(tmp_path, nest)
    text = json.dumps(_manifest(plain)).replace('"@"', nested)
    _, damaged = _rewritten(tmp_path, manifest_text=text)
    outcomes = set()
    for frames in range(0, 600, 20):
        try:
            _at_stack_depth(frames, lambda: read_snapshot(damaged))
            outcomes.add("read")
        except SnapshotFileError as error:
            outcomes.add("RecursionError" if "RecursionError" in str(error) else str(error))
    assert outcomes <= {"read", "RecursionError"} and len(outcomes) == 2, outcomes


def _manifest(path):
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    return json.loads(json.loads(data[8 : 8 + length])["__metadata__"]["trainparity"])


def test_a_negative_tensor_reference_is_a_snapshot_error(tmp_path):
    # tensors[-1] silently aliased the last tensor
    def point_back(manifest):
        manifest["tree"] = ["m", [["a", ["t", -1]]]]

    _, damaged = _rewritten(tmp_path, point_back)
    _assert_unreadable(damaged, "tensor reference -1 in the manifest is negative")


@pytest.mark.parametrize(
    "entries",
    [[["n", ["i", "1"]], ["a", ["t", 0]]], [["a", ["t", 0]], ["a", ["t", 1]]]],
    ids=["unsorted", "duplicate"],
)
def test_unsorted_or_repeated_mapping_keys_are_a_snapshot_error(tmp_path, entries):
    # the diff pairs keys in sorted order: unsorted keys gave `missing_baseline` for a present key
    source, damaged = _rewritten(tmp_path, lambda m: m.update(tree=["m", entries]))
    _assert_unreadable(damaged, "mapping keys in the manifest are not sorted and unique")
    assert diff_snapshots(source, damaged).outcome is Outcome.ERROR


def test_a_deeply_nested_environment_is_a_snapshot_error_not_a_crash_of_the_report(tmp_path):
    # the file read, but rendering the diff's environment leads raised RecursionError
    def nest(manifest):
        value: list = []
        for _ in range(450):
            value = [value]
        manifest["environment"]["x"] = value

    source, damaged = _rewritten(tmp_path, nest)
    _assert_unreadable(damaged, "manifest environment is nested more than 16 levels deep")
    result = diff_snapshots(source, damaged)
    assert result.outcome is Outcome.ERROR
    text_report(result.to_dict())


def _npy(tmp_path, header: str, payload: bytes = b"", version=b"\x01\x00"):
    path = tmp_path / "ids.npy"
    text = header.encode("latin1")
    path.write_bytes(b"\x93NUMPY" + version + len(text).to_bytes(2, "little") + text + payload)
    return audit_rank_arrays({0: path}, policy=NoCrossRankOverlap())


@pytest.mark.parametrize(
    "header, version, detail",
    [
        (
            "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), 'extra': 1, }",
            b"\x01\x00",
            "has an unreadable .npy header (keys [\"'descr'\", \"'extra'\"",
        ),
        (
            "{'descr': '<i8', 'fortran_order': 0, 'shape': (1,), }",
            b"\x01\x00",
            "has an unreadable .npy header (keys",
        ),
        (
            "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
            b"\x01\x01",
            "has an unsupported .npy format version 1.1",
        ),
    ],
    ids=["extra-key", "fortran-order-not-bool", "minor-version"],
)
def test_npy_files_numpy_refuses_are_refused(tmp_path, header, version, detail):
    # these were audited as IDs although numpy.load refuses them: not files numpy.save wrote
    payload = numpy.array([5], dtype="<i8").tobytes()
    result = _npy(tmp_path, header, payload, version)
    assert result.outcome is Outcome.ERROR
    assert detail in result.message
    with pytest.raises(ValueError):
        numpy.load(tmp_path / "ids.npy")
