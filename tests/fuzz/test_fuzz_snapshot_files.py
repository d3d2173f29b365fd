"""Fuzz the snapshot reader and `diff`: real snapshot files, damaged byte by byte and field by field.

Every input must end as a snapshot or SnapshotFileError from read_snapshot,
and as a SnapshotDiff (ERROR when a file cannot be read) from diff_snapshots
and `trainparity diff`: never another exception, a hang or a crash.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from trainparity._internal.comparison.policies import ToleranceComparison
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.state.snapshot_file import SnapshotFileError, read_snapshot
from trainparity.outcomes import Outcome

from tests.fuzz.budget import fuzz_settings, within_seconds
from tests.fuzz.checks import assert_well_formed_result, run_cli
from tests.fuzz.conftest import Seeds
from tests.fuzz.mutations import (
    BYTE_EDITS,
    apply_edits,
    json_damage,
    json_text,
)
from tests.helpers import set_manifest

SEEDS = st.sampled_from(["full", "shifted", "digest", "tiny", "referenced", "pieced"])
TOLERANCE = ToleranceComparison(rtol=1e-3, atol=1e-6, equal_nan=True)


def check_snapshot_bytes(seeds: Seeds, data: bytes) -> None:
    """Read, diff (API and CLI) one mutated file; each must end as documented."""
    path = seeds.fresh_path(".safetensors")
    path.write_bytes(data)
    try:
        with within_seconds():
            try:
                read_snapshot(path)
                readable = True
            except SnapshotFileError:
                readable = False
            pairs = (
                (seeds.files["full"], path, None),
                (path, path, TOLERANCE),
                (path, seeds.files["digest"], None),
            )
            for baseline, candidate, comparison in pairs:
                result = diff_snapshots(baseline, candidate, comparison=comparison)
                report = assert_well_formed_result(result)
                if not readable:
                    assert result.outcome is Outcome.ERROR, report["message"]
            code, _, _ = run_cli(["diff", str(seeds.files["full"]), str(path)])
            assert code != 4
            if not readable:
                assert code == 3
    finally:
        path.unlink()


# ------------------------------------------------------------------ byte-level damage


@fuzz_settings(ci_examples=200)
@given(seed=SEEDS, edits=BYTE_EDITS)
def test_byte_damage(snapshot_seeds, seed, edits):
    data = snapshot_seeds.files[seed].read_bytes()
    check_snapshot_bytes(snapshot_seeds, apply_edits(data, edits))


# ------------------------------------------------------------------ structured damage


def split(data: bytes) -> tuple[dict, dict, bytes]:
    """(header, manifest, tensor bytes) of a well-formed snapshot file."""
    (length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + length])
    manifest = json.loads(header["__metadata__"]["trainparity"])
    return header, manifest, data[8 + length :]


def assemble(header_text: str, body: bytes, *, encoding: str = "utf-8") -> bytes:
    encoded = header_text.encode(encoding, errors="surrogatepass")
    encoded += b" " * (-(8 + len(encoded)) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + body


@fuzz_settings(ci_examples=300)
@given(seed=SEEDS, data=st.data())
def test_json_header_and_manifest_damage(snapshot_seeds, seed, data):
    header, manifest, body = split(snapshot_seeds.files[seed].read_bytes())
    if data.draw(st.booleans(), label="damage the manifest (else the outer header)"):
        manifest = data.draw(json_damage(manifest))
        set_manifest(header["__metadata__"], json_text(manifest))
    else:
        set_manifest(header["__metadata__"], json.dumps(manifest))
        header = data.draw(json_damage(header))
    encoding = data.draw(st.sampled_from(["utf-8", "utf-8", "utf-16", "latin-1", "utf-32"]))
    try:
        text = json_text(header)
        if encoding == "latin-1":
            text += ' "\u00e9"'  # a non-ASCII byte that is not valid UTF-8 once encoded
        encoded = assemble(text, body, encoding=encoding)
    except UnicodeEncodeError:
        encoded = assemble(json_text(header), body, encoding="utf-8")
    check_snapshot_bytes(snapshot_seeds, encoded)


# Edits that keep a file self-consistent enough to reach the comparison itself.
_DTYPES = [
    "torch.float32",
    "torch.int32",
    "torch.float64",
    "torch.int64",
    "torch.complex64",
    "torch.float16",
    "torch.bfloat16",
    "torch.bool",
    "torch.uint8",
    "torch.float8_e5m2",
    "torch.complex128",
    "torch.uint64",
    "torch.float128",
]
_OFFSETS = st.one_of(
    st.integers(-(2**64), 2**65),
    st.sampled_from([-1, 0, 1, 7, 2**63, 2**64 - 1]),
)


@fuzz_settings(ci_examples=200)
@given(seed=st.sampled_from(["full", "shifted", "tiny"]), data=st.data())
def test_tensor_table_damage(snapshot_seeds, seed, data):
    header, manifest, body = split(snapshot_seeds.files[seed].read_bytes())
    tensors = manifest["tensors"]
    entry = data.draw(st.sampled_from(tensors), label="tensor")
    location = header[entry["name"]]
    change = data.draw(
        st.sampled_from(["offsets", "overlap", "shift", "dtype", "shape", "tree", "digest"])
    )
    if change == "offsets":
        location["data_offsets"] = [data.draw(_OFFSETS), data.draw(_OFFSETS)]
    elif change == "overlap":  # two tensors over the same bytes, sized to pass the checks
        other = header[data.draw(st.sampled_from(tensors))["name"]]
        begin = other["data_offsets"][0]
        location["data_offsets"] = [begin, begin + entry["nbytes"]]
    elif change == "shift":  # misaligned tensor bytes
        shift = data.draw(st.integers(-9, 9))
        location["data_offsets"] = [offset + shift for offset in location["data_offsets"]]
    elif change == "dtype":  # same bytes read as another dtype, shape kept consistent
        entry["dtype"] = data.draw(st.sampled_from(_DTYPES))
        element = {"torch.float64": 8, "torch.int64": 8, "torch.complex64": 8, "torch.uint64": 8}
        size = element.get(entry["dtype"], 16 if "complex128" in entry["dtype"] else 4)
        if "16" in entry["dtype"]:
            size = 2
        if entry["dtype"] in ("torch.bool", "torch.uint8", "torch.float8_e5m2"):
            size = 1
        if entry["nbytes"] % size == 0:
            entry["shape"] = [entry["nbytes"] // size]
    elif change == "shape":
        entry["shape"] = data.draw(st.lists(st.integers(-2, 2**40), max_size=4))
        entry["nbytes"] = data.draw(st.one_of(st.just(entry["nbytes"]), st.integers(-1, 2**70)))
    elif change == "tree":  # a reference to a tensor that does not exist, or twice to one
        index = data.draw(st.integers(-len(tensors) - 1, len(tensors)))
        manifest["tree"] = ["m", [["a", ["t", index]], ["b", ["t", 0]]]]
    else:
        entry["digest"] = data.draw(st.sampled_from(["", "00" * 16, "0" * 31, "gg" * 16]))
    set_manifest(header["__metadata__"], json.dumps(manifest))
    check_snapshot_bytes(snapshot_seeds, assemble(json.dumps(header), body))


@fuzz_settings(ci_examples=100)
@given(data=st.data())
def test_reference_damage(snapshot_seeds, data):
    """A format-2 snapshot's references rewritten: another path, offset, or none at all."""
    header, manifest, body = split(snapshot_seeds.files["referenced"].read_bytes())
    referenced = [entry for entry in manifest["tensors"] if "reference" in entry]
    entry = data.draw(st.sampled_from(referenced), label="tensor")
    change = data.draw(st.sampled_from(["offset", "path", "kind", "dropped"]))
    if change == "offset":
        entry["reference"]["offset"] = data.draw(_OFFSETS)
    elif change == "path":
        entry["reference"]["path"] = data.draw(
            st.sampled_from(["", "relative.pt", str(snapshot_seeds.files["full"]), "/"])
        )
    elif change == "kind":
        entry["reference"] = data.draw(st.sampled_from([None, [], "x", {"path": "p"}]))
    else:
        del entry["reference"]
    set_manifest(header["__metadata__"], json.dumps(manifest))
    check_snapshot_bytes(snapshot_seeds, assemble(json.dumps(header), body))


def _referenced_ranges(manifest: dict) -> list[tuple[int, int]]:
    return [
        (entry["reference"]["offset"], entry["reference"]["offset"] + entry["nbytes"])
        for entry in manifest["tensors"]
        if "reference" in entry
    ]


@fuzz_settings(ci_examples=100)
@given(data=st.data())
def test_a_referenced_checkpoint_damaged_after_observation(snapshot_seeds, data):
    """Bits flipped in a copy of the referenced checkpoint that the snapshot is pointed at:
    a flip inside a referenced range is an ERROR, whatever trust_digests says; elsewhere the
    values are the observed ones and the snapshot still equals `full`."""
    header, manifest, body = split(snapshot_seeds.files["referenced"].read_bytes())
    referenced = [entry for entry in manifest["tensors"] if "reference" in entry]
    source = Path(referenced[0]["reference"]["path"])
    checkpoint = bytearray(source.read_bytes())
    # Half the positions are drawn among the referenced bytes, a small part of the file.
    inside = [p for begin, end in _referenced_ranges(manifest) for p in range(begin, end)]
    positions = st.one_of(st.integers(0, len(checkpoint) - 1), st.sampled_from(inside))
    flips = data.draw(st.lists(st.tuples(positions, st.integers(0, 7)), max_size=3))
    for position, bit in flips:
        checkpoint[position] ^= 1 << bit
    copy = snapshot_seeds.fresh_path(".pt")
    copy.write_bytes(checkpoint)
    for entry in referenced:
        entry["reference"]["path"] = str(copy)
    set_manifest(header["__metadata__"], json.dumps(manifest))
    path = snapshot_seeds.fresh_path(".safetensors")
    path.write_bytes(assemble(json.dumps(header), body))
    changed = bytes(checkpoint) != source.read_bytes()
    touched = changed and any(
        checkpoint[begin:end] != source.read_bytes()[begin:end]
        for begin, end in _referenced_ranges(manifest)
    )
    try:
        with within_seconds():
            for trust in (False, True):
                result = diff_snapshots(snapshot_seeds.files["full"], path, trust_digests=trust)
                expected = Outcome.ERROR if touched else Outcome.PASS
                assert result.outcome is expected, result.message
    finally:
        path.unlink()
        copy.unlink()


_PIECE_FIELDS = st.sampled_from(["offset", "length", "path", "kind", "extra"])


@fuzz_settings(ci_examples=100)
@given(data=st.data())
def test_piece_list_damage(snapshot_seeds, data):
    """A format-3 snapshot's piece lists rewritten: a piece's field, pieces dropped,
    repeated or reordered, the list replaced, the reference dropped."""
    header, manifest, body = split(snapshot_seeds.files["pieced"].read_bytes())
    pieced = [entry for entry in manifest["tensors"] if "pieces" in entry.get("reference", {})]
    entry = data.draw(st.sampled_from(pieced), label="tensor")
    pieces = entry["reference"]["pieces"]
    change = data.draw(st.sampled_from(["piece", "drop", "repeat", "reverse", "list", "none"]))
    if change == "piece":
        piece = data.draw(st.sampled_from(pieces))
        field = data.draw(_PIECE_FIELDS)
        if field in ("offset", "length"):
            piece[field] = data.draw(st.one_of(_OFFSETS, st.sampled_from([True, 1.0, "1"])))
        elif field == "path":
            piece["path"] = data.draw(
                st.sampled_from(["", "relative.bin", str(snapshot_seeds.files["full"]), "/", 7])
            )
        elif field == "kind":
            pieces[pieces.index(piece)] = data.draw(st.sampled_from([None, [], "x", {}]))
        else:
            piece["extra"] = 0
    elif change == "drop":
        del pieces[data.draw(st.integers(0, len(pieces) - 1))]
    elif change == "repeat":
        pieces.append(dict(pieces[0]))
    elif change == "reverse":
        pieces.reverse()
    elif change == "list":
        entry["reference"] = {"pieces": data.draw(st.sampled_from([None, [], {}, "x", [[]]]))}
    else:
        del entry["reference"]
    set_manifest(header["__metadata__"], json.dumps(manifest))
    check_snapshot_bytes(snapshot_seeds, assemble(json.dumps(header), body))


@fuzz_settings(ci_examples=60)
@given(data=st.data())
def test_a_pieces_file_damaged_after_observation(snapshot_seeds, data):
    """Bits flipped in a copy of the file the pieces lie in: a flip inside a piece is an
    ERROR, whatever trust_digests says; elsewhere the snapshot still equals `full`."""
    header, manifest, body = split(snapshot_seeds.files["pieced"].read_bytes())
    ranges = [
        (piece["offset"], piece["offset"] + piece["length"])
        for entry in manifest["tensors"]
        for piece in entry.get("reference", {}).get("pieces", [])
    ]
    source = Path(manifest["tensors"][0]["reference"]["pieces"][0]["path"])
    original = source.read_bytes()
    damaged = bytearray(original)
    inside = [p for begin, end in ranges for p in range(begin, end)]
    positions = st.one_of(st.integers(0, len(damaged) - 1), st.sampled_from(inside))
    for position, bit in data.draw(st.lists(st.tuples(positions, st.integers(0, 7)), max_size=3)):
        damaged[position] ^= 1 << bit
    copy = snapshot_seeds.fresh_path(".bin")
    copy.write_bytes(damaged)
    for entry in manifest["tensors"]:
        for piece in entry.get("reference", {}).get("pieces", []):
            piece["path"] = str(copy)
    set_manifest(header["__metadata__"], json.dumps(manifest))
    path = snapshot_seeds.fresh_path(".safetensors")
    path.write_bytes(assemble(json.dumps(header), body))
    touched = any(damaged[begin:end] != original[begin:end] for begin, end in ranges)
    try:
        with within_seconds():
            for trust in (False, True):
                result = diff_snapshots(snapshot_seeds.files["full"], path, trust_digests=trust)
                expected = Outcome.ERROR if touched else Outcome.PASS
                assert result.outcome is expected, result.message
    finally:
        path.unlink()
        copy.unlink()


def test_the_seeds_read_and_diff_cleanly(snapshot_seeds):
    """The fuzzers start from valid files: they read, and compare as expected."""
    files = snapshot_seeds.files
    for path in files.values():
        read_snapshot(path)
    assert diff_snapshots(files["full"], files["full"]).outcome is Outcome.PASS
    assert diff_snapshots(files["full"], files["shifted"]).outcome is Outcome.FAIL
    assert diff_snapshots(files["full"], files["digest"]).outcome is Outcome.PASS
    assert diff_snapshots(files["full"], files["referenced"]).outcome is Outcome.PASS
    assert diff_snapshots(files["full"], files["pieced"]).outcome is Outcome.PASS
    pieced = split(files["pieced"].read_bytes())[1]
    assert pieced["format"] == "trainparity-snapshot/3"
    assert all("pieces" in entry["reference"] for entry in pieced["tensors"] if entry["nbytes"])
    assert sorted(Path(path).name for path in snapshot_seeds.directory.iterdir()) == sorted(
        Path(path).name for path in files.values()
    )
