"""The data pipeline across resumes: real loaders' resume faults, found in the sample IDs they yield.

Each case runs an uninterrupted reference and a resumed run as phases (A, B,
C) in this process, on real torchdata 0.11.0 `StatefulDataLoader`s, real
`StatefulDistributedSampler`/`DistributedSampler`, real HF `datasets` and
real accelerate: a phase builds its loader afresh and restores only what a
checkpoint holds (saved through torch.save and read back), as a new process
would. Ranks are built explicitly (`num_replicas`, `rank`), which yields
exactly what a rank of a gloo job yields (docs/coverage.md); the resume on
another rank count runs real gloo jobs under torchrun, one per phase. Every phase
records with `track_ids` into its own directory, as check_resume gives each
phase, and the records are audited with the functions check_resume uses.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset
from trainparity import ExactlyOnce, SameGlobalOrder
from trainparity._internal.coverage.recorded_ids import audit_recorded_chain
from trainparity._internal.recording.record_ids import flush_ids, recorded_ids
from trainparity._internal.resume.sample_order import resume_chain_differences
from trainparity.distributed import track_ids
from trainparity.sample_coverage import audit_global_order

from tests.helpers import run_torchrun_job

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
StatefulDistributedSampler = pytest.importorskip(
    "torchdata.stateful_dataloader.sampler"
).StatefulDistributedSampler


class Indexed(Dataset):
    """`size` samples; each carries its index, its stable ID."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, object]:
        return {"id": index, "x": torch.tensor([float(index)])}


def ids_of(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return batch["id"]


def through_checkpoint(state: object) -> object:
    """`state` as a resumed process reads it back: saved with torch.save, loaded weights-only."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


_WEIGHT = torch.nn.Parameter(torch.zeros(1))
_OPTIMIZER = torch.optim.SGD([_WEIGHT], lr=0.0)


def consume(loader, directory: Path, *, epoch: int, rank: int = 0, batches: int | None = None):
    """Train on `loader` (all of it, or `batches` batches) recording its IDs; return the iterator.

    Each batch is followed by an optimizer step, as in a training loop: the
    records count those steps, which is how a batch trained on is told from
    one drawn only to fast-forward past it (docs/coverage.md).
    """
    tracked = track_ids(loader, id_of=ids_of, epoch=epoch, directory=directory, rank=rank)
    iterator = iter(tracked)
    for _batch in itertools.islice(iterator, batches):
        _WEIGHT.grad = torch.ones(1)
        _OPTIMIZER.step()
    return iterator


def differences(root: Path, phases: list[str]) -> list:
    flush_ids()
    return [
        placed.difference
        for placed in resume_chain_differences(
            root / "reference", [(name, root / name) for name in phases]
        )
    ]


def stateful_loader(workers: int) -> StatefulDataLoader:
    return StatefulDataLoader(
        Indexed(24),
        batch_size=3,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
    )


@pytest.mark.parametrize("workers", [0, 2])
def test_stateful_loader_with_its_state_saved_and_restored_passes(tmp_path, workers):
    consume(stateful_loader(workers), tmp_path / "reference", epoch=0)
    split = stateful_loader(workers)
    iterator = consume(split, tmp_path / "candidate_split", epoch=0, batches=3)
    state = through_checkpoint(split.state_dict())
    del iterator
    resumed = stateful_loader(workers)
    resumed.load_state_dict(state)
    consume(resumed, tmp_path / "candidate_resume", epoch=0)
    assert differences(tmp_path, ["candidate_split", "candidate_resume"]) == []


def test_loader_state_not_saved_repeats_samples_after_the_split(tmp_path):
    consume(stateful_loader(2), tmp_path / "reference", epoch=0)
    consume(stateful_loader(2), tmp_path / "candidate_split", epoch=0, batches=3)
    # The resumed process restores the weights but not the loader: its epoch starts over.
    consume(stateful_loader(2), tmp_path / "candidate_resume", epoch=0)
    found = differences(tmp_path, ["candidate_split", "candidate_resume"])
    first = next(iter(recorded_ids(tmp_path / "reference", 0)[0].cast("q")))
    assert [difference.reason for difference in found] == ["sample_repeated"]
    assert found[0].path == "coverage.epoch0.rank0"
    assert found[0].candidate == (
        f"ID {first} consumed again at position 9 of epoch 0 on rank 0 "
        "(candidate_resume's position 0); first consumed at position 0"
    )


def distributed_epochs(sampler_type, directory: Path, rank: int, epochs=(0, 1)) -> None:
    """An uninterrupted rank of 2: set_epoch at each epoch's start, every batch consumed."""
    sampler = sampler_type(Indexed(16), num_replicas=2, rank=rank, shuffle=True, seed=0)
    loader = StatefulDataLoader(Indexed(16), batch_size=2, sampler=sampler)
    for epoch in epochs:
        sampler.set_epoch(epoch)
        consume(loader, directory, epoch=epoch, rank=rank)


def test_stateful_distributed_sampler_resumed_in_epoch_1_names_the_first_moved_position(tmp_path):
    # torchdata 0.11.0's StatefulDistributedSampler saves `yielded` but not the epoch
    # (meta-pytorch/data#1513, fixed after that release): no simulation, the real sampler.
    for rank in (0, 1):
        distributed_epochs(StatefulDistributedSampler, tmp_path / "reference", rank)
        sampler = StatefulDistributedSampler(Indexed(16), num_replicas=2, rank=rank, seed=0)
        loader = StatefulDataLoader(Indexed(16), batch_size=2, sampler=sampler)
        for epoch, batches in ((0, None), (1, 2)):
            sampler.set_epoch(epoch)
            iterator = consume(loader, tmp_path / "a", epoch=epoch, rank=rank, batches=batches)
        state = through_checkpoint({"loader": loader.state_dict(), "epoch": 1})
        del iterator
        # The resumed loop calls set_epoch only when an epoch starts; it resumes mid-epoch,
        # trusting the restored loader for the rest: the sampler is back in epoch 0.
        sampler = StatefulDistributedSampler(Indexed(16), num_replicas=2, rank=rank, seed=0)
        loader = StatefulDataLoader(Indexed(16), batch_size=2, sampler=sampler)
        loader.load_state_dict(state["loader"])
        assert sampler.epoch == 0
        consume(loader, tmp_path / "b", epoch=state["epoch"], rank=rank)
    found = differences(tmp_path, ["a", "b"])
    assert [difference.path for difference in found] == [
        "coverage.epoch1.rank0",
        "coverage.epoch1.rank1",
    ]
    # Position 4: the first after the boundary (2 batches of 2 IDs), consumed by phase b.
    assert all("position 4 of epoch 1" in d.candidate for d in found), found
    assert all("b's position 0" in d.candidate for d in found), found


def test_checkpoint_at_an_epoch_boundary_skips_the_next_epoch(tmp_path):
    # Real torchdata 0.11.0: a state saved after an epoch's last batch says "epoch in progress,
    # all yielded", so the resumed loader's first pass yields nothing (verl#7401's symptom).
    loader = stateful_loader(0)
    consume(loader, tmp_path / "reference", epoch=0)
    consume(loader, tmp_path / "reference", epoch=1)
    loader = stateful_loader(0)
    tracked = track_ids(loader, id_of=ids_of, epoch=0, directory=tmp_path / "a")
    for _batch in tracked:
        state = through_checkpoint({"loader": loader.state_dict(), "next_epoch": 1})
    resumed = stateful_loader(0)
    resumed.load_state_dict(state["loader"])
    for epoch in range(state["next_epoch"], 2):  # training "finishes": exit code 0
        consume(resumed, tmp_path / "b", epoch=epoch)
    found = differences(tmp_path, ["a", "b"])
    assert [(d.path, d.reason) for d in found] == [("coverage.epoch1.rank0", "sample_missing")]
    assert "never consumed: a + b stop after 0 IDs" in found[0].candidate
    coverage = audit_recorded_chain([tmp_path / "a", tmp_path / "b"], policy=ExactlyOnce(range(24)))
    assert coverage[0].outcome == "PASS"
    assert 1 not in coverage  # no phase recorded a single ID of epoch 1
    epoch1 = audit_recorded_chain(
        [tmp_path / "a", tmp_path / "b"], policy=ExactlyOnce(range(24)), epochs=[1]
    )[1]
    assert (epoch1.outcome, epoch1.missing_id_count) == ("FAIL", 24)


def test_skip_first_batches_without_set_epoch_repeats_and_misses_samples(tmp_path):
    accelerate = pytest.importorskip("accelerate")
    for rank in (0, 1):
        sampler = DistributedSampler(Indexed(16), num_replicas=2, rank=rank, seed=0)
        loader = DataLoader(Indexed(16), batch_size=2, sampler=sampler)
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            consume(loader, tmp_path / "reference", epoch=epoch, rank=rank)
        for epoch, batches in ((0, None), (1, 2)):
            sampler.set_epoch(epoch)
            consume(loader, tmp_path / "a", epoch=epoch, rank=rank, batches=batches)
        # The resumed process skips the 2 batches it already trained on, without set_epoch(1).
        sampler = DistributedSampler(Indexed(16), num_replicas=2, rank=rank, seed=0)
        skipped = accelerate.skip_first_batches(
            DataLoader(Indexed(16), batch_size=2, sampler=sampler), 2
        )
        consume(skipped, tmp_path / "b", epoch=1, rank=rank)
    flush_ids()
    coverage = audit_recorded_chain([tmp_path / "a", tmp_path / "b"], policy=ExactlyOnce(range(16)))
    assert coverage[0].outcome == "PASS"
    assert coverage[1].outcome == "FAIL"
    assert coverage[1].repeated_id_count > 0 and coverage[1].missing_id_count > 0
    assert coverage[1].repeated_id_count == coverage[1].missing_id_count  # one for one
    found = differences(tmp_path, ["a", "b"])
    assert {d.path for d in found} == {"coverage.epoch1.rank0", "coverage.epoch1.rank1"}


def hf_stream():
    datasets = pytest.importorskip("datasets")
    return datasets.Dataset.from_dict({"id": list(range(40))}).to_iterable_dataset(num_shards=4)


class StaleStateAfterRestore(IterableDataset):
    """An HF IterableDataset behind a wrapper whose state goes stale once it has been restored.

    Simulates torchtitan#3907 (a second resume with num_workers=2 starting
    from sample 0) in our own code, since datasets 5.2.0 and torchdata
    0.11.0 resume A→B→C correctly on their own: `load_state_dict` rebinds
    the wrapped stream to a restored copy, but `state_dict` keeps reading the
    object built at construction, which never advanced. Phase B resumes
    right; the state B saves is the stream's start.
    """

    def __init__(self) -> None:
        self.built = hf_stream()
        self.stream = self.built

    def __iter__(self):
        return iter(self.stream)

    def state_dict(self):
        return self.built.state_dict()

    def load_state_dict(self, state) -> None:
        self.stream = hf_stream()
        self.stream.load_state_dict(state)


def hf_loader(dataset) -> StatefulDataLoader:
    return StatefulDataLoader(dataset, batch_size=2, num_workers=2)


def chain(tmp_path: Path, make_dataset) -> list:
    consume(hf_loader(make_dataset()), tmp_path / "reference", epoch=0)
    state = None
    for phase, batches in (("a", 3), ("b", 3), ("c", None)):
        loader = hf_loader(make_dataset())
        if state is not None:
            loader.load_state_dict(state)
        iterator = consume(loader, tmp_path / phase, epoch=0, batches=batches)
        state = through_checkpoint(loader.state_dict())
        del iterator
    return differences(tmp_path, ["a", "b", "c"])


def test_hf_stream_with_two_workers_resumes_twice_in_order(tmp_path):
    assert chain(tmp_path, hf_stream) == []


def test_second_resume_restarting_from_sample_0_fails_at_the_second_boundary(tmp_path):
    found = chain(tmp_path, StaleStateAfterRestore)
    assert [(d.path, d.reason) for d in found] == [("coverage.epoch0.rank0", "sample_repeated")]
    # A and B consumed 3 batches of 2 each: position 12 is C's first, after boundary 2.
    assert found[0].candidate == (
        "ID 0 consumed again at position 12 of epoch 0 on rank 0 "
        "(c's position 0, after boundary 2); first consumed at position 0"
    )


JOB = Path(__file__).resolve().parent / "fixtures" / "distributed" / "elastic_order_job.py"


@pytest.fixture(scope="module")
def elastic(tmp_path_factory) -> Path:
    """Real gloo jobs: the reference on 2 ranks and phase A on 2 ranks for 3 global batches
    (one job, each phase with its own loaders), then phase B on 1 rank (another job).

    Each job records both samplers (`dealt`, rank-count-dependent, and
    `kept`, global-order-keeping) into OUT/<sampler>/<phase>.
    """
    out = tmp_path_factory.mktemp("elastic")
    for world, phases in ((2, ["reference:0:-1", "a:0:3"]), (1, ["b:3:-1"])):
        run_torchrun_job(
            JOB, [str(out), *phases], ranks=world, out=out, logs=out / "logs" / str(world)
        )
    return out


def test_resume_on_another_rank_count_with_a_rank_dependent_sampler_names_the_global_batch(
    elastic,
):
    root = elastic / "dealt"
    found = differences(root, ["a", "b"])
    # The same samples per global batch (DistributedSampler deals them round-robin), another order.
    assert [(d.path, d.reason) for d in found] == [
        ("coverage.epoch0.global_batch3", "global_order")
    ]
    assert "(phase B on 1 rank, rank 0)" in found[0].candidate
    result = audit_global_order(root / "reference", [root / "a", root / "b"])
    assert (result.outcome, result.global_batch, result.phase, result.world_sizes) == (
        "FAIL",
        3,
        1,
        (2, 1),
    )
    assert result.moved and all(moved.global_batch == 3 for moved in result.moved)
    assert all(moved.phase == 1 and moved.rank == 0 for moved in result.moved)


def test_resume_on_another_rank_count_with_a_global_order_sampler_passes(elastic):
    root = elastic / "kept"
    assert differences(root, ["a", "b"]) == []
    result = audit_global_order(
        root / "reference", [root / "a", root / "b"], policy=SameGlobalOrder()
    )
    assert result.outcome == "PASS" and result.world_sizes == (2, 1)
