"""The coverage validation matrix with real DataLoaders and DistributedSamplers (CPU torch)."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import (  # noqa: E402
    DataLoader,
    DistributedSampler,
    IterableDataset,
    Sampler,
    TensorDataset,
)
from trainparity._internal.coverage.audit import (  # noqa: E402
    AtLeastOnce,
    ExactlyOnce,
    ExpectedPadding,
    NoCrossRankOverlap,
    SampleAnomaly,
    SampleObservation,
    SampleViolation,
    audit_rank_iterables,
    audit_sample_coverage,
)
from trainparity.outcomes import Outcome  # noqa: E402

O = SampleObservation  # noqa: E741


def distributed(length, world_size, drop_last=False, epoch=0, seed=23):
    """Per rank, one batch holding everything its DistributedSampler yields."""
    dataset = list(range(length))
    ranks = {}
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset,
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=seed,
            drop_last=drop_last,
        )
        sampler.set_epoch(epoch)
        ranks[rank] = [list(sampler)]
    return ranks


def identity(batch):
    return batch


def audit(rank_iterables, policy, **options):
    return audit_rank_iterables(
        rank_iterables, sample_id_extractor=identity, policy=policy, **options
    )


# ------------------------------------------------------------------ the 17 rows


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("seed", [23, 17])
def test_rows_1_to_4_world_sizes(world_size, seed, tmp_path):
    path = tmp_path / "evidence.json"
    result = audit(
        distributed(12, world_size, seed=seed), ExactlyOnce(range(12)), evidence_path=path
    )
    assert result.outcome == Outcome.PASS
    assert (result.total_observations, result.unique_observed_ids) == (12, 12)
    evidence = json.loads(path.read_text())
    ranks = sorted({o["rank"] for t in evidence["traces"] for o in t["occurrences"]})
    assert ranks == list(range(world_size))


def test_row_5_non_divisible_padding(tmp_path):
    path = tmp_path / "evidence.json"
    result = audit(distributed(10, 3), ExpectedPadding(range(10), 2), evidence_path=path)
    assert result.outcome == Outcome.PASS
    assert (result.total_observations, result.unique_observed_ids) == (12, 10)
    assert (result.repeated_id_count, result.cross_rank_overlap_id_count) == (2, 2)
    assert result.actual_padding_count == result.expected_padding_count == 2
    assert result.anomaly_examples == (
        SampleAnomaly("cross_rank_overlap+repeated_id", 1, 2, (0, 1), (), (0,)),
        SampleAnomaly("cross_rank_overlap+repeated_id", 9, 2, (1, 2), (), (0,)),
    )
    evidence = json.loads(path.read_text())
    assert evidence["actual_padding_count"] == 2
    assert all(len(entry["ranks"]) >= 1 for entry in evidence["repeated_ids"])


def test_row_6_drop_last_misses_a_sample():
    result = audit(distributed(10, 3, drop_last=True), ExactlyOnce(range(10)))
    assert result.outcome == Outcome.FAIL
    assert result.first_violation == SampleViolation(
        "missing_id", "coverage.missing_ids", 4, None, None, None, None
    )
    assert (result.total_observations, result.missing_id_count) == (9, 1)


ROW_7 = [O(0, 0, 0, 0), O(0, 0, 0, 1), O(1, 1, 0, 0)]
ROW_9 = [O(0, 0, 0, 0), O(1, 0, 0, 1), O(0, 1, 0, 0)]


def test_row_7_same_rank_duplicate(tmp_path):
    path = tmp_path / "evidence.json"
    result = audit_sample_coverage(ROW_7, ExactlyOnce(range(2)), evidence_path=path)
    assert result.first_violation == SampleViolation(
        "same_rank_duplicate", "coverage.same_rank_duplicate", 0, 0, None, 0, 1
    )
    assert (result.repeated_id_count, result.same_rank_duplicate_id_count) == (1, 1)
    assert result.cross_rank_overlap_id_count == 0
    assert result.anomaly_examples[0].kind == "repeated_id+same_rank_duplicate"
    evidence = json.loads(path.read_text())
    assert evidence["expected_ids"] == [0, 1] and evidence["actual_padding_count"] == 1
    assert evidence["same_rank_duplicates"] == [{"sample_id": 0, "rank": 0}]


def test_row_8_same_rank_allowed_by_no_cross():
    result = audit_sample_coverage(ROW_7, NoCrossRankOverlap())
    assert result.outcome == Outcome.PASS and result.expected_id_count is None
    assert result.same_rank_duplicate_id_count == 1


def test_row_9_cross_rank_overlap():
    result = audit_sample_coverage(ROW_9, NoCrossRankOverlap())
    assert result.first_violation == SampleViolation(
        "cross_rank_overlap", "coverage.cross_rank_overlap", 0, 1, None, 0, 0
    )
    assert result.cross_rank_overlap_id_count == 1
    assert result.anomaly_examples[0] == SampleAnomaly(
        "cross_rank_overlap+repeated_id", 0, 2, (0, 1), (), (0,)
    )


def test_row_10_missing_id():
    result = audit_sample_coverage([O(i, 0, 0, i) for i in range(4)], AtLeastOnce(range(5)))
    assert result.first_violation.kind == "missing_id" and result.first_violation.sample_id == 4
    assert result.missing_id_count == 1


def test_row_11_padding_count_mismatch():
    result = audit_sample_coverage(ROW_9, ExpectedPadding(range(2), 2))
    assert result.first_violation == SampleViolation(
        "padding_count", "coverage.actual_padding_count", None, None, None, None, None
    )
    assert (result.actual_padding_count, result.expected_padding_count) == (1, 2)


class FixedOrder(Sampler):
    def __init__(self, order):
        self.order = order

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


def test_row_12_custom_sampler():
    result = audit({0: [list(FixedOrder([4, 2, 0, 3, 1]))]}, ExactlyOnce(range(5)))
    assert result.outcome == Outcome.PASS


class Finite(IterableDataset):
    """Yields its IDs; each of several DataLoader workers takes its own share when shard=True."""

    def __init__(self, ids, shard=True):
        self.ids, self.shard = ids, shard

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None or not self.shard:
            return iter(self.ids)
        return iter(self.ids[info.id :: info.num_workers])


def test_row_13_finite_iterable_dataset():
    result = audit_rank_iterables(
        {0: [Finite(list(range(5)))]}, sample_id_extractor=iter, policy=ExactlyOnce(range(5))
    )
    assert result.outcome == Outcome.PASS


def test_row_14_unknown_universe_abstains():
    result = audit_sample_coverage([], ExactlyOnce(None))
    assert result.outcome == Outcome.ABSTAIN
    assert result.message == "a reliable finite expected ID universe is required for this policy"
    assert result.total_observations == result.unique_observed_ids == 0


def test_row_15_at_least_once_allows_repeats():
    result = audit_sample_coverage(ROW_9, AtLeastOnce(range(2)))
    assert result.outcome == Outcome.PASS
    assert (result.repeated_id_count, result.cross_rank_overlap_id_count) == (1, 1)


@pytest.mark.parametrize("seed", [23, 17])
def test_rows_16_17_shuffled_epochs(seed, tmp_path):
    orders = []
    for epoch in (0, 1):
        path = tmp_path / f"epoch{epoch}.json"
        ranks = distributed(12, 3, epoch=epoch, seed=seed)
        result = audit(ranks, ExactlyOnce(range(12)), epoch=epoch, evidence_path=path)
        assert result.outcome == Outcome.PASS
        evidence = json.loads(path.read_text())
        assert {o["epoch"] for t in evidence["traces"] for o in t["occurrences"]} == {epoch}
        orders.append([i for rank in sorted(ranks) for i in ranks[rank][0]])
    assert orders[0] != orders[1]


# ------------------------------------------------------------------ real DataLoaders


def ids_of(batch):
    return batch[0].tolist()


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
@pytest.mark.parametrize("length", [12, 13])
@pytest.mark.parametrize("drop_last", [False, True])
def test_dataloaders_over_distributed_samplers(world_size, length, drop_last):
    dataset = TensorDataset(torch.arange(length), torch.zeros(length, 2))
    loaders = {}
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=5, drop_last=drop_last
        )
        loaders[rank] = DataLoader(dataset, batch_size=3, sampler=sampler)
    if drop_last:
        kept = (length // world_size) * world_size
        result = audit_rank_iterables(
            loaders, sample_id_extractor=ids_of, policy=ExactlyOnce(range(length))
        )
        assert result.total_observations == kept
        assert result.missing_id_count == length - kept
        assert result.outcome == (Outcome.PASS if kept == length else Outcome.FAIL)
    else:
        padding = math.ceil(length / world_size) * world_size - length
        result = audit_rank_iterables(
            loaders, sample_id_extractor=ids_of, policy=ExpectedPadding(range(length), padding)
        )
        assert result.outcome == Outcome.PASS and result.actual_padding_count == padding
        assert result.repeated_id_count == padding


def test_readme_case_tensor_dataset():
    def loader(ids):
        return DataLoader(TensorDataset(torch.tensor(ids)), batch_size=2, shuffle=False)

    clean = audit_rank_iterables(
        {0: loader([0, 1, 2, 3])}, sample_id_extractor=ids_of, policy=ExactlyOnce((0, 1, 2, 3))
    )
    assert clean.outcome == Outcome.PASS
    fault = audit_rank_iterables(
        {0: loader([0, 1, 1, 3])}, sample_id_extractor=ids_of, policy=ExactlyOnce((0, 1, 2, 3))
    )
    assert fault.first_violation == SampleViolation(
        "same_rank_duplicate", "coverage.same_rank_duplicate", 1, 0, None, 0, 2
    )
    assert fault.missing_id_count == 1


def test_iterable_dataset_with_two_workers():
    loader = DataLoader(Finite(list(range(9))), batch_size=2, num_workers=2)
    result = audit_rank_iterables(
        {0: loader}, sample_id_extractor=lambda b: b.tolist(), policy=ExactlyOnce(range(9))
    )
    assert result.outcome == Outcome.PASS and result.total_observations == 9


class Unsharded(IterableDataset):
    """The classic worker bug: every worker yields every ID; items carry their worker ID."""

    def __init__(self, ids):
        self.ids = ids

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        worker = 0 if info is None else info.id
        return iter([(sample_id, worker) for sample_id in self.ids])


def test_unsharded_workers_duplicate_every_sample_and_the_worker_is_reported():
    observations = []
    for batch_ids, batch_workers in DataLoader(Unsharded(range(4)), batch_size=2, num_workers=2):
        for sample_id, worker in zip(batch_ids.tolist(), batch_workers.tolist(), strict=True):
            observations.append(O(sample_id, 0, 0, len(observations), worker))
    result = audit_sample_coverage(observations, ExactlyOnce(range(4)))
    assert result.outcome == Outcome.FAIL
    assert result.first_violation.kind == "same_rank_duplicate"
    assert result.first_violation.worker != observations[0].worker
    assert all(anomaly.workers == (0, 1) for anomaly in result.anomaly_examples)
