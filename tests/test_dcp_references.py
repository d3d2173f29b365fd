"""DCP directories and safetensors files observed by reference: per shard file, zero-copy.

A real two-rank DCP save (gloo, a FileStore, no ports): replicated entries are
spread over both ranks' shard files by DCP's deduplication, one entry is a
DTensor sharded over both ranks. The default observer maps the shard files;
the snapshot refers to each whole entry's range in its shard file, copies the
sharded one, and a flipped byte in a referenced range afterwards is an ERROR.
"""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from trainparity.cases.command_case import CommandCase, observe_default
from trainparity.checkpoints import load_dcp, load_safetensors
from trainparity.comparison.snapshots import diff_snapshots
from trainparity.outcomes import Outcome
from trainparity.processes.observer.worker import observe_one
from trainparity.state.file_ranges import checkpoint_files
from trainparity.state.normalize import normalize_observation
from trainparity.state.snapshot_file import (
    SNAPSHOT_REFERENCES_FORMAT,
    SnapshotFileError,
    read_snapshot,
    write_snapshot,
)

# Each rank: the same replicated model and Adam-like moments (whole entries, spread over
# the ranks' files), a per-rank value, and one DTensor sharded by rows (two chunks).
SAVE_SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    rank, store, target = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    generator = torch.Generator().manual_seed(7)
    state = {
        "model": {f"{i}.weight": torch.randn(96, 64, generator=generator) for i in range(4)},
        "optim": {
            "state": {i: {"exp_avg": torch.randn(96, 64, generator=generator),
                          "step": torch.tensor(3.0)} for i in range(4)},
            "param_groups": [{"lr": 0.01, "params": [0, 1, 2, 3]}],
        },
        "counts": torch.arange(10, dtype=torch.int64),
    }
    mesh = init_device_mesh("cpu", (2,))
    state["sharded"] = distribute_tensor(torch.randn(50, 8, generator=generator), mesh, [Shard(0)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=target)
    dist.barrier()
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def two_rank_dcp(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("dcp")
    target = directory / "checkpoint"
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", SAVE_SCRIPT, str(rank), str(directory / "store"), str(target)],
            env=environment,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(2)
    ]
    for process in ranks:
        _, errors = process.communicate(timeout=300)
        assert process.returncode == 0, errors
    assert sorted(path.name for path in target.glob("*.distcp")) == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    return target


def _manifest(path: Path) -> dict:
    data = path.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    return json.loads(json.loads(data[8 : 8 + length])["__metadata__"]["trainparity"])


def _snapshot(checkpoint: Path, target: Path):
    return write_snapshot(
        target,
        normalize_observation(observe_default(checkpoint)),
        step=1,
        reference_files=checkpoint_files(checkpoint),
    )


def _tensors(value, prefix=()):
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _tensors(item, (*prefix, index))


def test_mapped_dcp_reads_the_same_state_as_dcp_load(two_rank_dcp):
    copied, mapped = load_dcp(two_rank_dcp), load_dcp(two_rank_dcp, mmap=True)
    assert copied["optim"]["param_groups"] == mapped["optim"]["param_groups"]
    pairs = list(zip(_tensors(copied), _tensors(mapped), strict=True))
    assert len(pairs) == 14
    for (path, expected), (same_path, tensor) in pairs:
        assert path == same_path
        assert tensor.dtype == expected.dtype and torch.equal(tensor, expected), path
    assert sorted(load_dcp(two_rank_dcp, keys={"counts"}, mmap=True)) == ["counts"]


def test_whole_entries_refer_to_both_shard_files_and_the_sharded_one_is_copied(
    two_rank_dcp, tmp_path
):
    info = _snapshot(two_rank_dcp, tmp_path / "s.safetensors")
    manifest = _manifest(info.path)
    assert manifest["format"] == SNAPSHOT_REFERENCES_FORMAT
    referenced = {
        entry["name"]: Path(entry["reference"]["path"]).name
        for entry in manifest["tensors"]
        if "reference" in entry
    }
    # Everything but the DTensor's two chunks (the one entry sharded over two files).
    assert len(referenced) == 13 and "sharded" not in referenced
    assert set(referenced.values()) == {"__0_0.distcp", "__1_0.distcp"}
    assert info.tensor_bytes - info.referenced_bytes == 50 * 8 * 4
    snapshot, extras = read_snapshot(info.path)
    assert [Path(path).name for path in extras["referenced_files"]] == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    assert diff_snapshots(info.path, info.path).outcome is Outcome.PASS


def test_a_bit_flipped_in_a_shard_file_after_observation_is_an_error(two_rank_dcp, tmp_path):
    """Seeded flips inside every referenced range of both shard files: always an ERROR
    (even with trust_digests), and the restored files PASS again."""
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    for file in two_rank_dcp.iterdir():
        (checkpoint / file.name).write_bytes(file.read_bytes())
    snapshot = _snapshot(checkpoint, tmp_path / "s.safetensors").path
    references = [entry for entry in _manifest(snapshot)["tensors"] if "reference" in entry]
    picker = random.Random(43)
    flipped_files = set()
    for entry in references:
        file = Path(entry["reference"]["path"])
        original = file.read_bytes()
        position = entry["reference"]["offset"] + picker.randrange(entry["nbytes"])
        damaged = bytearray(original)
        damaged[position] ^= 1 << picker.randrange(8)
        file.write_bytes(damaged)
        for trust in (False, True):
            result = diff_snapshots(snapshot, snapshot, trust_digests=trust)
            assert result.outcome is Outcome.ERROR, (entry["name"], result.message)
            assert "changed after it was observed" in result.message
        with pytest.raises(SnapshotFileError, match=file.name):
            read_snapshot(snapshot)
        file.write_bytes(original)
        flipped_files.add(file.name)
    assert flipped_files == {"__0_0.distcp", "__1_0.distcp"}
    assert diff_snapshots(snapshot, snapshot).outcome is Outcome.PASS


def test_the_observer_worker_refers_to_a_dcp_directory(two_rank_dcp, tmp_path):
    case = CommandCase(
        template=["python", "train.py", "{checkpoint}"],
        checkpoint="{run_dir}/checkpoint",
        total_step=1,
    )
    request = {"checkpoint": str(two_rank_dcp), "snapshot": str(tmp_path / "s.safetensors")}
    record = observe_one(case, None, request)
    assert record["outcome"] == "PASS", record
    assert record["referenced_bytes"] == 4 * 2 * 96 * 64 * 4 + 4 * 4 + 10 * 8
    assert record["snapshot_bytes"] < 50 * 8 * 4 + 64 * 1024  # the copied chunk and the manifest


# safetensors -------------------------------------------------------------------------


def _save_safetensors(path: Path, seed: int, names) -> dict:
    safetensors_torch = pytest.importorskip("safetensors.torch")
    generator = torch.Generator().manual_seed(seed)
    state = {name: torch.randn(33, 17, generator=generator) for name in names}
    safetensors_torch.save_file(state, path)
    return state


@pytest.mark.parametrize("layout", ["file", "directory"])
def test_the_default_observer_refers_to_safetensors_files(tmp_path, layout):
    if layout == "file":
        checkpoint = tmp_path / "model.safetensors"
        expected = _save_safetensors(checkpoint, 1, ["a", "b"])
    else:
        checkpoint = tmp_path / "model"
        checkpoint.mkdir()
        expected = _save_safetensors(checkpoint / "model-00001-of-00002.safetensors", 1, ["a"])
        expected |= _save_safetensors(checkpoint / "model-00002-of-00002.safetensors", 2, ["b"])
        (checkpoint / "model.safetensors.index.json").write_text("{}")
    observed = observe_default(checkpoint)
    assert observed.keys() == expected.keys()
    info = _snapshot(checkpoint, tmp_path / "s.safetensors")
    assert info.referenced_bytes == info.tensor_bytes == 2 * 33 * 17 * 4
    references = [entry["reference"] for entry in _manifest(info.path)["tensors"]]
    assert len({reference["path"] for reference in references}) == (1 if layout == "file" else 2)
    snapshot, _ = read_snapshot(info.path)
    assert diff_snapshots(info.path, info.path).outcome is Outcome.PASS
    file = Path(references[-1]["path"])
    damaged = bytearray(file.read_bytes())
    damaged[references[-1]["offset"] + 5] ^= 0x04
    file.write_bytes(damaged)
    result = diff_snapshots(info.path, info.path)
    assert result.outcome is Outcome.ERROR and "changed after it was observed" in result.message


def test_a_directory_with_more_than_safetensors_files_is_not_read_as_its_weights(tmp_path):
    """A trainer's checkpoint directory: reading model.safetensors alone would leave the
    optimizer unobserved, so the default observer refuses it (load_dcp's message)."""
    _save_safetensors(tmp_path / "model.safetensors", 1, ["a"])
    torch.save({"state": {}}, tmp_path / "optimizer.pt")
    with pytest.raises(FileNotFoundError, match="not a DCP checkpoint directory"):
        observe_default(tmp_path)


def test_a_key_in_two_safetensors_files_is_refused(tmp_path):
    _save_safetensors(tmp_path / "one.safetensors", 1, ["a"])
    _save_safetensors(tmp_path / "two.safetensors", 2, ["a"])
    with pytest.raises(ValueError, match="'a' is in both one.safetensors and two.safetensors"):
        load_safetensors(tmp_path)
