"""DCP directories and safetensors files observed by reference: per shard file, zero-copy.

A real two-rank DCP save (gloo, a FileStore, no ports): replicated entries are
spread over both ranks' shard files by DCP's deduplication, one entry is a
DTensor sharded by rows over both ranks, one by columns. The default observer
maps the shard files; the snapshot refers to each whole entry's range in its
shard file and to the row-sharded entry's two pieces (format 3), copies the
column-sharded one, and a flipped byte in a referenced range afterwards is an
ERROR. A real FSDP2 (fully_shard) save of a model and its Adam state: every
sharded entry is a reference of one piece per rank.
"""

from __future__ import annotations

import json
import os
import random
import struct
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from trainparity._internal.cases.command_case import CommandCase, observe_default
from trainparity._internal.comparison.snapshots import diff_snapshots
from trainparity._internal.processes.observer.snapshot_service import observe_one
from trainparity._internal.state.file_ranges import checkpoint_files
from trainparity._internal.state.freeze import FrozenMapping
from trainparity._internal.state.normalize import normalize_observation
from trainparity._internal.state.snapshot_file import (
    SNAPSHOT_PIECES_FORMAT,
    SnapshotFileError,
    read_snapshot,
    write_snapshot,
)
from trainparity.checkpoints import load_dcp, load_safetensors
from trainparity.outcomes import Outcome

from tests.few_at_a_time import run_a_few_at_a_time
from tests.helpers import set_manifest

# Each rank: the same replicated model and Adam-like moments (whole entries, spread over
# the ranks' files), a per-rank value, one DTensor sharded by rows (two chunks, referenced
# as two pieces) and one sharded by columns (two chunks that are no row ranges: copied).
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
    state["columns"] = distribute_tensor(torch.randn(6, 10, generator=generator), mesh, [Shard(1)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=target)
    dist.barrier()
    dist.destroy_process_group()
    """
)


def _save_on_ranks(script: str, ranks: int, directory: Path, target: Path) -> None:
    """`python -c script RANK STORE TARGET` on every rank at once, one thread each.

    The ranks are forked from this worker's warm server (torch imported once): the tests
    read what they saved, not how they started (tests/few_at_a_time.py).
    """
    (directory / "ranks").mkdir()
    commands = {
        f"rank{rank}": [
            sys.executable,
            "-c",
            script,
            str(rank),
            str(directory / "store"),
            str(target),
        ]
        for rank in range(ranks)
    }
    done = run_a_few_at_a_time(
        commands,
        cwd=directory / "ranks",
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        at_once=ranks,
        limit_s=300,
        warm=True,
    )
    for name, (returncode, _stdout, stderr) in sorted(done.items()):
        assert returncode == 0, f"{name}: {stderr[-3000:]}"


@pytest.fixture(scope="module")
def two_rank_dcp(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("dcp")
    target = directory / "checkpoint"
    _save_on_ranks(SAVE_SCRIPT, 2, directory, target)
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


def _ranges(entry: dict) -> list[dict]:
    """An entry's referenced file ranges ({path, offset, length}): one, its pieces, or none."""
    reference = entry.get("reference")
    if reference is None:
        return []
    if "pieces" in reference:
        return reference["pieces"]
    return [{**reference, "length": entry["nbytes"]}]


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
    assert len(pairs) == 15
    for (path, expected), (same_path, tensor) in pairs:
        assert path == same_path
        assert tensor.dtype == expected.dtype and torch.equal(tensor, expected), path
    assert sorted(load_dcp(two_rank_dcp, keys={"counts"}, mmap=True)) == ["counts"]


def test_whole_entries_refer_to_both_shard_files_and_the_column_sharded_one_is_copied(
    two_rank_dcp, tmp_path
):
    info = _snapshot(two_rank_dcp, tmp_path / "s.safetensors")
    manifest = _manifest(info.path)
    assert manifest["format"] == SNAPSHOT_PIECES_FORMAT
    referenced = {
        entry["name"]: Path(entry["reference"]["path"]).name
        for entry in manifest["tensors"]
        if "path" in entry.get("reference", {})
    }
    pieces = {
        entry["name"]: [Path(piece["path"]).name for piece in entry["reference"]["pieces"]]
        for entry in manifest["tensors"]
        if "pieces" in entry.get("reference", {})
    }
    # Every whole entry by one range, the row-sharded DTensor by its two chunks' pieces,
    # and the column-sharded one copied (its chunks are no row ranges).
    assert len(referenced) == 13
    assert set(referenced.values()) == {"__0_0.distcp", "__1_0.distcp"}
    assert pieces == {"sharded": ["__0_0.distcp", "__1_0.distcp"]}
    assert info.tensor_bytes - info.referenced_bytes == 6 * 10 * 4
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
    references = [
        (entry["name"], reference)
        for entry in _manifest(snapshot)["tensors"]
        for reference in _ranges(entry)
    ]
    assert len(references) == 13 + 2
    picker = random.Random(43)
    flipped_files = set()
    for name, reference in references:
        file = Path(reference["path"])
        original = file.read_bytes()
        position = reference["offset"] + picker.randrange(reference["length"])
        damaged = bytearray(original)
        damaged[position] ^= 1 << picker.randrange(8)
        file.write_bytes(damaged)
        for trust in (False, True):
            result = diff_snapshots(snapshot, snapshot, trust_digests=trust)
            assert result.outcome is Outcome.ERROR, (name, result.message)
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
    assert record["referenced_bytes"] == 4 * 2 * 96 * 64 * 4 + 4 * 4 + 10 * 8 + 50 * 8 * 4
    assert record["snapshot_bytes"] < 6 * 10 * 4 + 64 * 1024  # the copied entry and the manifest


# FSDP2 ---------------------------------------------------------------------------------

# Each rank: a model of two Linear layers under fully_shard (Shard(0): uneven row ranges,
# 33 = 17 + 16 rows), one Adam step, model and optimizer state saved by DCP.
FSDP2_SAVE_SCRIPT = textwrap.dedent(
    """
    import os, sys, warnings
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard

    rank, store, target = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 33), torch.nn.ReLU(), torch.nn.Linear(33, 96))
    for layer in (model[0], model[2]):
        fully_shard(layer)
    fully_shard(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    torch.manual_seed(1 + rank)
    model(torch.randn(4, 64)).square().mean().backward()
    optimizer.step()
    model_state, optimizer_state = get_state_dict(model, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model_state, "optim": optimizer_state}, checkpoint_id=target)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)  # gloo's threads can abort a normal interpreter exit ("terminate called")
    """
)
FSDP2_SHARDED = 4 * 3  # two weights and two biases, each with exp_avg and exp_avg_sq


@pytest.fixture(scope="module")
def fsdp2_dcp(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("fsdp2")
    target = directory / "checkpoint"
    _save_on_ranks(FSDP2_SAVE_SCRIPT, 2, directory, target)
    return target


def _copy_of(checkpoint: Path, directory: Path) -> Path:
    directory.mkdir()
    for file in checkpoint.iterdir():
        if file.is_file():
            (directory / file.name).write_bytes(file.read_bytes())
    return directory


def test_fsdp2_sharded_entries_are_referenced_by_their_pieces(fsdp2_dcp, tmp_path):
    info = _snapshot(fsdp2_dcp, tmp_path / "s.safetensors")
    manifest = _manifest(info.path)
    assert manifest["format"] == SNAPSHOT_PIECES_FORMAT
    by_pieces = {
        entry["name"]: entry["reference"]["pieces"]
        for entry in manifest["tensors"]
        if "pieces" in entry.get("reference", {})
    }
    assert len(by_pieces) == FSDP2_SHARDED
    assert {name.split("[")[0] for name in by_pieces} == {"model", "optim.state"}
    for name, pieces in by_pieces.items():
        # One row range per rank, rank 0's first: 17 of 33 rows, or 48 of 96.
        assert [Path(piece["path"]).name for piece in pieces] == ["__0_0.distcp", "__1_0.distcp"]
        assert pieces[0]["length"] >= pieces[1]["length"], name
    # The Adam step counters are whole entries (one range); nothing is copied.
    single = [entry for entry in manifest["tensors"] if "path" in entry.get("reference", {})]
    assert [entry["name"].rsplit(".", 1)[-1] for entry in single] == ["step"] * 4
    assert info.referenced_bytes == info.tensor_bytes > 3 * (64 * 33 + 33 * 96) * 4
    (header_length,) = struct.unpack_from("<Q", info.path.read_bytes())
    assert info.file_bytes == info.path.stat().st_size == 8 + header_length  # no tensor data


def test_fsdp2_pieces_read_back_as_dcp_load_reads_them(fsdp2_dcp, tmp_path):
    expected = dict(_tensors(load_dcp(fsdp2_dcp)))
    assert len(expected) == FSDP2_SHARDED + 4
    assert dict(_tensors(load_dcp(fsdp2_dcp, mmap=True))).keys() == expected.keys()
    for path, tensor in _tensors(load_dcp(fsdp2_dcp, mmap=True)):
        assert torch.equal(tensor, expected[path]), path
    snapshot, extras = read_snapshot(_snapshot(fsdp2_dcp, tmp_path / "s.safetensors").path)
    assert [Path(path).name for path in extras["referenced_files"]] == [
        "__0_0.distcp",
        "__1_0.distcp",
    ]
    for path, tensor in expected.items():
        assert torch.equal(_frozen_at(snapshot.state, path).to_tensor(), tensor), path


def test_a_bit_flipped_in_any_piece_is_an_error_and_the_restored_file_passes(fsdp2_dcp, tmp_path):
    checkpoint = _copy_of(fsdp2_dcp, tmp_path / "checkpoint")
    snapshot = _snapshot(checkpoint, tmp_path / "s.safetensors").path
    assert diff_snapshots(snapshot, snapshot).outcome is Outcome.PASS
    pieces = [
        (entry["name"], piece)
        for entry in _manifest(snapshot)["tensors"]
        for piece in entry.get("reference", {}).get("pieces", [])
    ]
    assert len(pieces) == 2 * FSDP2_SHARDED
    picker = random.Random(43)
    for name, piece in pieces:
        file = Path(piece["path"])
        original = file.read_bytes()
        damaged = bytearray(original)
        damaged[piece["offset"] + picker.randrange(piece["length"])] ^= 1 << picker.randrange(8)
        file.write_bytes(damaged)
        for trust in (False, True):
            result = diff_snapshots(snapshot, snapshot, trust_digests=trust)
            assert result.outcome is Outcome.ERROR, (name, result.message)
            assert "changed after it was observed" in result.message
        with pytest.raises(SnapshotFileError, match=file.name):
            read_snapshot(snapshot)
        file.write_bytes(original)
    assert diff_snapshots(snapshot, snapshot).outcome is Outcome.PASS


def test_an_assembled_entry_the_observer_changed_is_copied(fsdp2_dcp, tmp_path):
    state = normalize_observation(observe_default(fsdp2_dcp))
    state["model"]["0.weight"].add_(1.0)  # the observed value is no longer the files' bytes
    info = write_snapshot(
        tmp_path / "s.safetensors", state, step=1, reference_files=checkpoint_files(fsdp2_dcp)
    )
    copied = [
        entry["name"] for entry in _manifest(info.path)["tensors"] if "reference" not in entry
    ]
    assert copied == ['model["0.weight"]']
    assert info.tensor_bytes - info.referenced_bytes == 33 * 64 * 4
    snapshot, _ = read_snapshot(info.path)
    leaf = _frozen_at(snapshot.state, ("model", "0.weight"))
    assert torch.equal(leaf.to_tensor(), state["model"]["0.weight"])


def _frozen_at(node, path):
    for part in path:
        node = node.as_dict()[part] if isinstance(node, FrozenMapping) else node.items[part]
    return node


def _set_pieces(edit):
    def apply(manifest):
        entry = next(e for e in manifest["tensors"] if "pieces" in e.get("reference", {}))
        edit(entry["reference"]["pieces"], entry)

    return apply


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (_set_pieces(lambda pieces, entry: pieces.clear()), "malformed piece list"),
        (_set_pieces(lambda pieces, entry: pieces.append(7)), "malformed piece list"),
        (_set_pieces(lambda pieces, entry: pieces[0].update(offset=True)), "malformed piece"),
        (_set_pieces(lambda pieces, entry: pieces[0].update(length=0)), "malformed piece"),
        (_set_pieces(lambda pieces, entry: pieces[0].update(length=-4)), "malformed piece"),
        (_set_pieces(lambda pieces, entry: pieces[0].update(path=None)), "malformed piece"),
        (_set_pieces(lambda pieces, entry: pieces[0].update(extra=1)), "malformed piece"),
        (_set_pieces(lambda pieces, entry: entry["reference"].update(path="x")), "malformed"),
        (_set_pieces(lambda pieces, entry: entry.update(reference={"pieces": {}})), "malformed"),
        (_set_pieces(lambda pieces, entry: pieces[1].update(length=4)), "its pieces hold"),
        (_set_pieces(lambda pieces, entry: pieces[1].update(offset=-8)), "refers to bytes"),
        (_set_pieces(lambda pieces, entry: pieces[1].update(offset=1 << 40)), "refers to bytes"),
        (_set_pieces(lambda pieces, entry: pieces[0].update(path="/nonexistent/f")), "cannot be"),
        (_set_pieces(lambda pieces, entry: pieces.reverse()), "changed after it was observed"),
        (lambda m: m.update(format="trainparity-snapshot/2"), "only format"),
    ],
)
def test_a_malformed_piece_list_is_refused(fsdp2_dcp, tmp_path, edit, says):
    snapshot = _snapshot(fsdp2_dcp, tmp_path / "s.safetensors").path
    data = snapshot.read_bytes()
    (length,) = struct.unpack_from("<Q", data)
    header = json.loads(data[8 : 8 + length])
    manifest = json.loads(header["__metadata__"]["trainparity"])
    edit(manifest)
    set_manifest(header["__metadata__"], json.dumps(manifest, sort_keys=True))
    encoded = json.dumps(header).encode()
    encoded += b" " * (-(8 + len(encoded)) % 8)
    snapshot.write_bytes(struct.pack("<Q", len(encoded)) + encoded + data[8 + length :])
    with pytest.raises(SnapshotFileError, match=says):
        read_snapshot(snapshot)
    assert diff_snapshots(snapshot, snapshot).outcome is Outcome.ERROR


# A 2x2 ("dp", "tp") mesh: the first layer ColwiseParallel then fully_shard (placements
# (_StridedShard(dim=0, sf=2), Shard(dim=0)): row ranges out of order across the ranks), the
# second RowwiseParallel (its weight split by columns too), and the full tensors for reference.
TWO_D_SAVE_SCRIPT = textwrap.dedent(
    """
    import os, sys, warnings
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import (
        ColwiseParallel, RowwiseParallel, parallelize_module,
    )
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import fully_shard

    rank, store, target = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 12), torch.nn.Linear(12, 10))
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    parallelize_module(model[0], mesh["tp"], ColwiseParallel())
    parallelize_module(model[1], mesh["tp"], RowwiseParallel())
    for layer in model:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    state = model.state_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = {name: tensor.full_tensor() for name, tensor in state.items()}
        if rank == 0:
            torch.save(full, target + ".full.pt")
        dcp.save({"model": state}, checkpoint_id=target)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)
    """
)


def test_a_two_d_mesh_save_refers_to_its_row_ranges_and_copies_its_column_shards(tmp_path):
    target = tmp_path / "checkpoint"
    _save_on_ranks(TWO_D_SAVE_SCRIPT, 4, tmp_path, target)
    full = torch.load(f"{target}.full.pt", weights_only=True)
    mapped = load_dcp(target, mmap=True)["model"]
    assert mapped.keys() == full.keys()
    for name, tensor in full.items():
        assert torch.equal(mapped[name], tensor), name
    info = _snapshot(target, tmp_path / "s.safetensors")
    kinds = {
        entry["name"]: "pieces" if "pieces" in entry.get("reference", {}) else "copied"
        for entry in _manifest(info.path)["tensors"]
    }
    assert kinds == {
        'model["0.bias"]': "pieces",
        'model["0.weight"]': "pieces",
        'model["1.bias"]': "pieces",
        'model["1.weight"]': "copied",  # RowwiseParallel: its chunks split the columns
    }
    assert diff_snapshots(info.path, info.path).outcome is Outcome.PASS
    snapshot, _ = read_snapshot(info.path)
    for name, tensor in full.items():
        assert torch.equal(_frozen_at(snapshot.state, ("model", name)).to_tensor(), tensor), name


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
