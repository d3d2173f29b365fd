"""track_ids records what a loader yields, batch by batch, and SameGlobalOrder audits it across phases."""

from __future__ import annotations

import struct

import numpy
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset
from trainparity._internal.recording.record_ids import (
    IDS_DIR_VARIABLE,
    batch_ends,
    flush_ids,
    read_recorded_ids,
    record_ids,
)
from trainparity._internal.recording.track_ids import TrackedLoader
from trainparity.distributed import track_ids
from trainparity.sample_coverage import SameGlobalOrder, audit_global_order


class Stream(IterableDataset):
    """IDs 0..n-1, each worker taking every num_workers-th one."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        yield from range(worker, self.size, workers)


def recorded(directory, epoch=0, rank=0):
    flush_ids()
    path = directory / f"rank{rank}.epoch{epoch}.ids"
    return read_recorded_ids(path).cast("q").tolist(), batch_ends(path).tolist()


def loaders():
    """{name: (loader, id_of)}: a map-style DataLoader, an IterableDataset on 2 workers, HF rows."""
    datasets = pytest.importorskip("datasets")
    tensors = TensorDataset(torch.arange(10), torch.zeros(10))
    rows = datasets.Dataset.from_dict({"id": list(range(10)), "text": ["x"] * 10})
    return {
        "DataLoader": (DataLoader(tensors, batch_size=4, shuffle=True), lambda batch: batch[0]),
        "IterableDataset": (DataLoader(Stream(10), batch_size=3, num_workers=2), lambda b: b),
        "datasets.Dataset": (rows, lambda row: row["id"]),  # rows one by one: batches of one
    }


@pytest.mark.parametrize("name", ["DataLoader", "IterableDataset", "datasets.Dataset"])
def test_every_batch_a_loader_yields_is_recorded_with_its_boundary(tmp_path, name):
    loader, id_of = loaders()[name]
    tracked = track_ids(loader, id_of=id_of, epoch=0, directory=tmp_path)
    yielded = [numpy.atleast_1d(numpy.asarray(id_of(batch))).tolist() for batch in tracked]
    ids, ends = recorded(tmp_path)
    assert ids == [value for batch in yielded for value in batch]
    assert ends == numpy.cumsum([len(batch) for batch in yielded]).tolist()
    assert sorted(ids) == list(range(10))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_loader_is_saved_and_restored_through_the_wrapper(tmp_path, workers):
    torchdata = pytest.importorskip("torchdata.stateful_dataloader")
    datasets = pytest.importorskip("datasets")
    rows = datasets.Dataset.from_dict({"id": list(range(12))}).with_format("torch")

    def make():
        return torchdata.StatefulDataLoader(
            rows,
            batch_size=2,
            shuffle=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(0),
        )

    tracked = track_ids(make(), id_of=lambda batch: batch["id"], epoch=0, directory=tmp_path)
    assert isinstance(tracked, TrackedLoader) and len(tracked) == 6
    iterator = iter(tracked)
    first = [next(iterator)["id"].tolist() for _ in range(2)]
    state = tracked.state_dict()  # the loader's own method, through the wrapper
    del iterator
    resumed = track_ids(make(), id_of=lambda batch: batch["id"], epoch=0, directory=tmp_path)
    resumed.load_state_dict(state)
    rest = [batch["id"].tolist() for batch in resumed]
    ids, ends = recorded(tmp_path)
    assert ids == [value for batch in first + rest for value in batch]
    assert sorted(ids) == list(range(12)) and ends == list(range(2, 13, 2))


def test_outside_a_check_track_ids_returns_the_loader_itself(monkeypatch):
    monkeypatch.delenv(IDS_DIR_VARIABLE, raising=False)
    loader = DataLoader(TensorDataset(torch.arange(4)), batch_size=2)
    assert track_ids(loader, id_of=lambda batch: batch[0], epoch=0) is loader


def test_inside_a_check_the_directory_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(IDS_DIR_VARIABLE, str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    epochs = iter([5])
    loader = track_ids(
        [torch.tensor([7, 8])], id_of=lambda batch: batch, epoch=lambda: next(epochs)
    )
    assert [batch.tolist() for batch in loader] == [[7, 8]]
    assert recorded(tmp_path, epoch=5, rank=3) == ([7, 8], [2])


def test_wrong_arguments_say_what_to_pass():
    with pytest.raises(TypeError, match="id_of must be a callable"):
        track_ids([], id_of="id", epoch=0, directory="unused")
    with pytest.raises(ValueError, match="non-negative int or a callable"):
        track_ids([], id_of=len, epoch=-1, directory="unused")


def test_pending_tensors_keep_their_order_with_other_batches(tmp_path):
    # Tensors are joined a few dozen batches at a time; a list between them must not jump ahead.
    for batch in ([0, 1], torch.tensor([2]), [3], torch.tensor([[4, 5]]), numpy.array([6])):
        record_ids(batch, epoch=0, directory=tmp_path)
    for value in range(7, 200):
        record_ids(torch.tensor([value]), epoch=0, directory=tmp_path)
    ids, ends = recorded(tmp_path)
    assert ids == list(range(200))
    assert ends[:5] == [2, 3, 4, 6, 7] and len(ends) == 5 + 193
    raw = (tmp_path / "rank0.epoch0.batches").read_bytes()
    assert struct.unpack("<q", raw[:8]) == (2,)


def write_run(directory, sequence, world, global_batch, first=0, stop=None, epoch=0):
    """Global batches [first, stop) of `sequence` on `world` ranks, as record_ids writes them."""
    share = global_batch // world
    starts = range(first * global_batch, len(sequence), global_batch)
    for start in starts if stop is None else starts[: stop - first]:
        for rank in range(world):
            part = sequence[start + rank * share : start + (rank + 1) * share]
            record_ids(part, epoch=epoch, directory=directory, rank=rank)
    flush_ids()


SEQUENCE = list(numpy.random.default_rng(0).permutation(48))


def test_the_same_global_sequence_on_other_rank_counts_passes(tmp_path):
    write_run(tmp_path / "ref", SEQUENCE, 4, 8)
    write_run(tmp_path / "a", SEQUENCE, 2, 8, stop=2)
    write_run(tmp_path / "b", SEQUENCE, 8, 8, first=2, stop=4)
    write_run(tmp_path / "c", SEQUENCE, 1, 8, first=4)
    result = audit_global_order(tmp_path / "ref", [tmp_path / "a", tmp_path / "b", tmp_path / "c"])
    assert (result.outcome, result.world_sizes) == ("PASS", (2, 8, 1)), result


def test_two_swapped_ids_name_the_global_batch_position_phase_and_where_they_went(tmp_path):
    swapped = list(SEQUENCE)
    swapped[20], swapped[33] = swapped[33], swapped[20]
    write_run(tmp_path / "ref", SEQUENCE, 4, 8)
    write_run(tmp_path / "a", swapped, 2, 8, stop=2)
    write_run(tmp_path / "b", swapped, 4, 8, first=2)
    result = audit_global_order(tmp_path / "ref", [tmp_path / "a", tmp_path / "b"])
    # Position 20 is global batch 2, position 4: phase B (4 ranks of 2), rank 2.
    assert (result.outcome, result.epoch, result.global_batch, result.position) == ("FAIL", 0, 2, 4)
    assert (result.phase, result.rank) == (1, 2)
    moved = result.moved[0]
    assert (moved.sample_id, moved.global_batch, moved.position) == (SEQUENCE[20], 4, 1)
    assert result.difference.path == "coverage.epoch0.global_batch2"
    assert result.difference.candidate.startswith(
        f"ID {SEQUENCE[33]} at epoch 0, global batch 2, position 4 (phase B on 4 ranks, rank 2)"
    )


def test_a_phase_where_only_some_ranks_report_ids_names_those_ranks(tmp_path):
    """Under tensor parallel only the first rank of each TP group reports its group's IDs:
    ranks 0 and 2 of a 2 x 2 mesh. The message names them, not "3 ranks"."""
    swapped = list(SEQUENCE)
    swapped[20], swapped[33] = swapped[33], swapped[20]
    write_run(tmp_path / "ref", SEQUENCE, 2, 8)
    write_run(tmp_path / "a", swapped, 2, 8, stop=2)
    share = 4
    for start in range(16, len(swapped), 8):
        for group, rank in enumerate((0, 2)):
            part = swapped[start + group * share : start + (group + 1) * share]
            record_ids(part, epoch=0, directory=tmp_path / "b", rank=rank)
    flush_ids()
    result = audit_global_order(tmp_path / "ref", [tmp_path / "a", tmp_path / "b"])
    assert (result.outcome, result.global_batch, result.position) == ("FAIL", 2, 4)
    assert (result.phase, result.rank) == (1, 2)
    assert "(phase B on ranks 0 and 2, rank 2)" in result.difference.candidate, result


def test_a_repeated_global_batch_and_a_short_run_are_named(tmp_path):
    write_run(tmp_path / "ref", SEQUENCE, 2, 8)
    write_run(tmp_path / "a", SEQUENCE, 2, 8, stop=3)
    write_run(tmp_path / "b", SEQUENCE, 4, 8, first=2)  # global batch 2 again
    result = audit_global_order(tmp_path / "ref", [tmp_path / "a", tmp_path / "b"])
    assert (result.global_batch, result.position) == (3, 0)
    assert "consumed again (first at global batch 2, position 0)" in result.difference.candidate
    write_run(tmp_path / "short", SEQUENCE, 4, 8, stop=5)
    short = audit_global_order(tmp_path / "ref", [tmp_path / "short"])
    assert (short.global_batch, short.position, short.phase) == (5, 0, None)
    assert short.difference.candidate.startswith("no more IDs after 40 in epoch 0; moved: ID")
    assert all(moved.global_batch is None for moved in short.moved)


def test_uneven_batches_are_cut_into_the_global_order_by_their_recorded_ends(tmp_path):
    # Rank 1's last batch is short and rank 0 has one batch more: the general (unequal) path.
    for rank, batches in ((0, [[0, 1], [4, 5], [8]]), (1, [[2, 3], [6, 7]])):
        for batch in batches:
            record_ids(batch, epoch=0, directory=tmp_path / "ref", rank=rank)
    record_ids([0, 1, 2, 3], epoch=0, directory=tmp_path / "run", rank=0)
    record_ids([4, 5, 6, 7], epoch=0, directory=tmp_path / "run", rank=0)
    record_ids([8], epoch=0, directory=tmp_path / "run", rank=0)
    flush_ids()
    assert audit_global_order(tmp_path / "ref", [tmp_path / "run"]).outcome == "PASS"
    record_ids([9], epoch=1, directory=tmp_path / "run", rank=0)
    flush_ids()
    extra = audit_global_order(tmp_path / "ref", [tmp_path / "run"])
    assert (extra.outcome, extra.epoch, extra.global_batch) == ("FAIL", 1, 0)
    assert extra.difference.baseline == "no more IDs after 0 in epoch 1"


def test_nothing_recorded_abstains_and_bad_arguments_are_refused(tmp_path):
    result = audit_global_order(tmp_path / "none", [tmp_path / "none"])
    assert result.outcome == "ABSTAIN" and "recorded no sample IDs" in result.message
    with pytest.raises(ValueError, match="non-empty list of record directories"):
        audit_global_order(tmp_path, tmp_path)
    with pytest.raises(TypeError, match="SameGlobalOrder"):
        audit_global_order(tmp_path, [tmp_path], policy="order")
    assert SameGlobalOrder().name == "same_global_order"
