"""Snapshots that refer to a checkpoint's bytes instead of copying them (format 2).

Real torch.save files loaded with torch.load(mmap=True), real snapshot files,
real bit flips in the checkpoint after observation: a changed referenced byte
is an error, never a PASS.
"""

from __future__ import annotations

import json
import mmap
import os
import random
import struct
import sys
from pathlib import Path

import pytest
import torch
from trainparity import check_resume
from trainparity._internal.cases.command_case import CommandCase, observe_default
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.state.file_ranges import MappedFileLocator
from trainparity._internal.state.normalize import normalize_observation
from trainparity._internal.state.snapshot_file import (
    SNAPSHOT_FILE_FORMAT,
    SNAPSHOT_REFERENCES_FORMAT,
    SnapshotFileError,
    read_snapshot,
    write_snapshot,
)
from trainparity.outcomes import Outcome

from tests.helpers import set_manifest


def _save_checkpoint(path: Path) -> dict:
    """A model with Adam state, its RNG state and step, saved as torch.save does."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 8))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 64)).square().mean().backward()
    optimizer.step()
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": torch.get_rng_state(),
        "step": 1,
    }
    torch.save(state, path)
    return torch.load(path, weights_only=True)


def _snapshot(observation: dict, checkpoint: Path, target: Path):
    return write_snapshot(
        target, normalize_observation(observation), step=1, reference_files=[checkpoint]
    )


def _manifest(path: Path) -> dict:
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    return json.loads(json.loads(data[8 : 8 + length])["__metadata__"]["trainparity"])


def _flat(value, prefix=()):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flat(item, (*prefix, str(key)))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _flat(item, (*prefix, str(index)))
    else:
        yield prefix, value


def _frozen_leaves(value, prefix=()):
    entries = getattr(value, "entries", None)
    if entries is not None:
        for key, item in entries:
            yield from _frozen_leaves(item, (*prefix, key))
    elif hasattr(value, "items") and hasattr(value, "kind"):
        for index, item in enumerate(value.items):
            yield from _frozen_leaves(item, (*prefix, str(index)))
    else:
        yield prefix, value


def _assert_same_values(snapshot_state, expected: dict) -> None:
    read = dict(_frozen_leaves(snapshot_state))
    wanted = dict(_flat(expected))
    assert read.keys() == wanted.keys()
    for path, value in wanted.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(read[path].to_tensor(), value), path
        else:
            assert read[path] == value, path


def test_tensors_mapped_from_the_checkpoint_are_referenced_not_copied(tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    expected = _save_checkpoint(checkpoint)
    info = _snapshot(observe_default(checkpoint), checkpoint, tmp_path / "s.safetensors")
    assert info.referenced_bytes == info.tensor_bytes > 0
    assert info.file_bytes < info.tensor_bytes  # the manifest only
    manifest = _manifest(info.path)
    assert manifest["format"] == SNAPSHOT_REFERENCES_FORMAT
    assert all(entry["reference"]["path"] == str(checkpoint) for entry in manifest["tensors"])
    snapshot, extras = read_snapshot(info.path)
    assert extras["referenced_files"] == [str(checkpoint)]
    _assert_same_values(snapshot.state, expected)


def test_a_state_read_into_memory_is_copied_and_keeps_format_1(tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    expected = _save_checkpoint(checkpoint)
    with_references = _snapshot(expected, checkpoint, tmp_path / "a.safetensors")
    without = write_snapshot(tmp_path / "b.safetensors", normalize_observation(expected), step=1)
    assert with_references.referenced_bytes == 0
    assert _manifest(with_references.path)["format"] == SNAPSHOT_FILE_FORMAT
    # Same environment, same state: byte for byte the file written before references existed.
    assert with_references.path.read_bytes() == without.path.read_bytes()


def test_a_tensor_the_observer_changed_or_built_is_copied_with_its_observed_values(tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    _save_checkpoint(checkpoint)
    observation = observe_default(checkpoint)
    observation["model"]["0.weight"].add_(1.0)  # copy-on-write: the page leaves the file
    observation["doubled"] = observation["model"]["2.bias"] * 2  # a new tensor
    observation["strided"] = observation["model"]["0.weight"].t()  # not contiguous
    observation["rows"] = observation["model"]["2.weight"][2:5]  # inside the file, offset
    observation["bits"] = observation["model"]["2.bias"].view(torch.int32)  # same bytes
    info = _snapshot(observation, checkpoint, tmp_path / "s.safetensors")
    referenced = {
        entry["name"] for entry in _manifest(info.path)["tensors"] if "reference" in entry
    }
    assert 'model["0.weight"]' not in referenced
    assert {"doubled", "strided"}.isdisjoint(referenced)
    assert {'model["0.bias"]', 'model["2.bias"]', 'model["2.weight"]', "rows", "bits"} <= referenced
    entries = {entry["name"]: entry for entry in _manifest(info.path)["tensors"]}
    row_bytes = 32 * 4
    assert (
        entries["rows"]["reference"]["offset"]
        == entries['model["2.weight"]']["reference"]["offset"] + 2 * row_bytes
    )
    snapshot, _ = read_snapshot(info.path)
    _assert_same_values(snapshot.state, observation)


def _referenced_ranges(manifest: dict) -> list[tuple[int, int]]:
    return [
        (entry["reference"]["offset"], entry["reference"]["offset"] + entry["nbytes"])
        for entry in manifest["tensors"]
    ]


def test_a_bit_flipped_in_the_checkpoint_after_observation_is_an_error(tmp_path):
    """Seeded flips anywhere in the checkpoint: inside a referenced range always an ERROR
    (even with trust_digests); outside one, no observed value changed, so the diff still PASSes."""
    checkpoint = tmp_path / "checkpoint.pt"
    _save_checkpoint(checkpoint)
    snapshot = _snapshot(observe_default(checkpoint), checkpoint, tmp_path / "s.safetensors").path
    ranges = _referenced_ranges(_manifest(snapshot))
    original = checkpoint.read_bytes()
    picker = random.Random(43)
    # Every referenced range's first and last byte, then positions drawn over the whole file.
    positions = [p for begin, end in ranges for p in (begin, end - 1)]
    positions += [picker.randrange(len(original)) for _ in range(120)]
    inside_count = 0
    for position in positions:
        damaged = bytearray(original)
        damaged[position] ^= 1 << picker.randrange(8)
        checkpoint.write_bytes(damaged)
        inside = any(begin <= position < end for begin, end in ranges)
        inside_count += inside
        for trust in (False, True):
            result = diff_snapshots(snapshot, snapshot, trust_digests=trust)
            if inside:
                assert result.outcome is Outcome.ERROR, (position, result.message)
                assert "changed after it was observed" in result.message
            else:
                assert result.outcome is Outcome.PASS, (position, result.message)
    assert inside_count > len(ranges) * 2  # the drawn positions hit tensor bytes too
    checkpoint.write_bytes(original)
    assert diff_snapshots(snapshot, snapshot).outcome is Outcome.PASS


@pytest.mark.parametrize("change", ["removed", "truncated", "emptied"])
def test_a_missing_or_shorter_checkpoint_is_an_error_that_names_it(tmp_path, change):
    checkpoint = tmp_path / "checkpoint.pt"
    _save_checkpoint(checkpoint)
    snapshot = _snapshot(observe_default(checkpoint), checkpoint, tmp_path / "s.safetensors").path
    if change == "removed":
        checkpoint.unlink()
    else:
        checkpoint.write_bytes(checkpoint.read_bytes()[: 0 if change == "emptied" else 1000])
    with pytest.raises(SnapshotFileError, match=f"checkpoint {checkpoint}"):
        read_snapshot(snapshot)
    assert diff_snapshots(snapshot, snapshot).outcome is Outcome.ERROR


def _rewrite_manifest(path: Path, edit) -> None:
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + length])
    manifest = json.loads(header["__metadata__"]["trainparity"])
    edit(manifest)
    set_manifest(header["__metadata__"], json.dumps(manifest, sort_keys=True))
    encoded = json.dumps(header).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length :])


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda m: m.update(format=SNAPSHOT_FILE_FORMAT), "is a reference, which format"),
        (lambda m: m.update(format="trainparity-snapshot/4"), "manifest format is"),
        (lambda m: m["tensors"][0].update(reference={"path": 7, "offset": 0}), "malformed ref"),
        (lambda m: m["tensors"][0]["reference"].update(offset=-8), "refers to bytes"),
        (lambda m: m["tensors"][0]["reference"].update(offset=True), "malformed reference"),
        (lambda m: m["tensors"][0].update(reference=[1]), "malformed reference"),
    ],
)
def test_a_malformed_reference_is_refused(tmp_path, edit, says):
    checkpoint = tmp_path / "checkpoint.pt"
    _save_checkpoint(checkpoint)
    snapshot = _snapshot(observe_default(checkpoint), checkpoint, tmp_path / "s.safetensors").path
    _rewrite_manifest(snapshot, edit)
    with pytest.raises(SnapshotFileError, match=says):
        read_snapshot(snapshot)


def test_a_resume_check_with_the_default_observer_refers_to_its_checkpoints(tmp_path):
    """End to end: the observer worker writes manifests only, the check PASSes, and a bit
    flipped later in a kept checkpoint makes a diff of the kept snapshots an ERROR."""
    case = CommandCase(
        template=[
            sys.executable,
            "-m",
            "trainparity.quickstarts.resume",
            "worker",
            "--run-dir",
            "{run_dir}",
            "--end-step",
            "{end_step}",
            "--resume-from",
            "{resume_from?}",
        ],
        checkpoint="{run_dir}/checkpoint.pt",
        split_step=2,
        total_step=4,
    )
    work = tmp_path / "work"
    result = check_resume(case, cwd=tmp_path, work_dir=work)
    assert result.outcome == "PASS", result.message
    snapshots = work / "snapshots"
    baseline = snapshots / "baseline_a.safetensors"
    candidate = snapshots / "candidate_resume.safetensors"
    manifest = _manifest(baseline)
    assert manifest["format"] == SNAPSHOT_REFERENCES_FORMAT
    referenced = [entry for entry in manifest["tensors"] if "reference" in entry]
    assert referenced and all(
        Path(entry["reference"]["path"]) == (work / "baseline_a" / "checkpoint.pt").resolve()
        for entry in referenced
    )
    assert diff_snapshots(baseline, candidate).outcome is Outcome.PASS
    checkpoint = Path(referenced[0]["reference"]["path"])
    damaged = bytearray(checkpoint.read_bytes())
    damaged[referenced[0]["reference"]["offset"]] ^= 0x10
    checkpoint.write_bytes(damaged)
    assert diff_snapshots(baseline, candidate).outcome is Outcome.ERROR


def test_a_safetensors_file_loaded_by_an_observer_is_referenced_too(tmp_path):
    """safetensors' load_file maps the file (as torch.load(mmap=True) does): its tensors are
    referenced, and a flipped byte in one of them afterwards is an ERROR."""
    safetensors_torch = pytest.importorskip("safetensors.torch")
    checkpoint = tmp_path / "model.safetensors"
    generator = torch.Generator().manual_seed(1)
    expected = {"w": torch.randn(64, 32, generator=generator), "b": torch.arange(7.0)}
    safetensors_torch.save_file(expected, checkpoint)
    loaded = safetensors_torch.load_file(checkpoint)
    info = _snapshot(loaded, checkpoint, tmp_path / "s.safetensors")
    assert info.referenced_bytes == info.tensor_bytes
    snapshot, _ = read_snapshot(info.path)
    _assert_same_values(snapshot.state, expected)
    entry = _manifest(info.path)["tensors"][0]
    damaged = bytearray(checkpoint.read_bytes())
    damaged[entry["reference"]["offset"] + entry["nbytes"] - 1] ^= 0x80
    checkpoint.write_bytes(damaged)
    assert diff_snapshots(info.path, info.path).outcome is Outcome.ERROR


def test_the_page_map_tells_a_written_tensor_from_one_that_is_still_the_files(tmp_path):
    """Unwritten pages spare the writer a second read of the file; a written one must not."""
    if not os.access("/proc/self/pagemap", os.R_OK):
        pytest.skip("this machine's /proc/self/pagemap cannot be read")
    checkpoint = tmp_path / "checkpoint.pt"
    _save_checkpoint(checkpoint)
    state = torch.load(checkpoint, weights_only=True, mmap=True)
    weight = state["model"]["0.weight"]
    locator = MappedFileLocator([checkpoint])
    before = locator.locate(weight)
    assert before is not None and before.unwritten
    # A tensor on other pages than the weight's (a page the write copies holds its neighbours too).
    page = mmap.PAGESIZE
    pages = set(range(before.offset // page, (before.offset + weight.nbytes - 1) // page + 1))
    apart = next(
        tensor
        for _, tensor in _flat(state)
        if isinstance(tensor, torch.Tensor)
        and (found := locator.locate(tensor)) is not None
        and not pages & set(range(found.offset // page, (found.offset + tensor.nbytes) // page + 1))
    )
    weight.add_(1.0)
    after, untouched = locator.locate(weight), locator.locate(apart)
    assert after is not None and not after.unwritten and after.offset == before.offset
    assert untouched is not None and untouched.unwritten
