"""check_resume on real loaders that lose their place: with record(), coverage is placed on the step axis.

Eight real checks (tests/fixtures/sample_position_cases.py), two at a time,
in one module fixture: torchdata's StatefulDataLoader (2 workers) whose state
is not restored, a 2-rank gloo job whose DistributedSampler batches are
skipped before set_epoch, an epoch boundary where only the IDs differ, a
fault in the optimizer state before any ID, a clean control, and three of
them without record(), which keep the answers they had before IDs had steps.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trainparity
from trainparity import Outcome

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = "tests.fixtures.sample_position_cases"
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
NAMES = (
    "SkipBeforeSetEpochCase",  # the longest first: four 2-rank torchrun phases
    "UnrecordedSkipBeforeSetEpochCase",
    "StatefulLoaderCase",
    "LoaderStateLostCase",
    "UnrecordedLoaderStateLostCase",
    "LoaderAndOptimizerStateLostCase",
    "EpochBoundaryOrderCase",
    "UnrecordedEpochBoundaryOrderCase",
)


KEPT = "StatefulLoaderCase"  # run in a work_dir, which a later test reuses


def _check(name: str, **where):
    return trainparity.check_resume(
        f"{CASES}:{name}",
        cwd=REPO_ROOT,
        environment=ONE_THREAD,
        timeout=900,  # a phase's limit: generous, so a loaded machine cannot change a verdict
        **where,
    )


@pytest.fixture(scope="module")
def kept_work_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("kept") / KEPT


@pytest.fixture(scope="module")
def results(tmp_path_factory, kept_work_dir):
    root = tmp_path_factory.mktemp("coverage_steps")

    def run(name: str):
        if name == KEPT:
            return _check(name, work_dir=kept_work_dir)
        return _check(name, temporary_root=root)

    with ThreadPoolExecutor(max_workers=2) as pool:
        found = dict(zip(NAMES, pool.map(run, NAMES), strict=True))
    assert list(root.iterdir()) == []  # every check removed its run directory
    return found


def _paths(result) -> list[str]:
    return [difference.path for difference in result.all_differences]


def _verdict(result) -> tuple[Outcome, int | None, str | None]:
    primary = result.primary_difference
    return result.outcome, result.first_divergent_step, primary and primary.path


def test_lost_loader_state_fails_at_the_repeated_sample_and_its_step(results):
    result = results["LoaderStateLostCase"]
    assert _verdict(result) == (Outcome.FAIL, 3, "coverage.epoch0.rank0"), result.message
    assert result.message == "first observed divergence at step 3: coverage.epoch0.rank0"
    primary = result.primary_difference
    assert primary.reason == "sample_repeated"
    # The restarted epoch's first batch again, in the resumed run's first step.
    assert "at position 4 during step 3" in primary.baseline
    assert "(candidate_resume's position 0 during step 3); first consumed at position 0" in (
        primary.candidate
    )
    # The records part at the same step: their differences follow the coverage differences.
    divergence = result.trajectory["first_divergence"]
    assert (divergence["step"], divergence["candidate_phase"]) == (3, "candidate_resume")
    coverage = ["coverage.epoch0.rank0", "coverage.epoch1.rank0"]
    assert _paths(result)[:2] == coverage
    assert _paths(result)[2:] == divergence["paths"] and "model.bias" in divergence["paths"]
    assert [difference.path for difference in result.final_state_differences][:2] == coverage


def test_two_ranks_skipping_before_set_epoch_fail_at_the_first_missing_sample(results):
    result = results["SkipBeforeSetEpochCase"]
    assert _verdict(result) == (Outcome.FAIL, 5, "coverage.epoch1.rank0"), result.message
    assert result.primary_difference.reason == "sample_missing"
    assert "candidate_resume's position 0 during step 5" in result.primary_difference.candidate
    divergence = result.trajectory["first_divergence"]
    assert (divergence["step"], divergence["rank"]) == (5, 0)
    paths = _paths(result)
    assert paths[:2] == ["coverage.epoch1.rank0", "coverage.epoch1.rank1"]
    assert paths[2:] == divergence["paths"] and "rank0.model.bias" in paths


def test_only_the_ids_differing_at_an_epoch_boundary_still_fails_at_coverage(results):
    result = results["EpochBoundaryOrderCase"]
    assert _verdict(result) == (Outcome.FAIL, 7, "coverage.epoch1.rank0"), result.message
    assert result.trajectory["first_divergence"] is None  # every record is equal
    assert _paths(result) == ["coverage.epoch1.rank0"]
    assert "during step 7" in result.primary_difference.candidate


def test_a_record_that_differs_before_any_sample_stays_primary_and_coverage_follows(results):
    result = results["LoaderAndOptimizerStateLostCase"]
    divergence = result.trajectory["first_divergence"]
    assert divergence["round_trip"] and divergence["step"] == 2
    assert _verdict(result) == (Outcome.FAIL, 2, divergence["paths"][0]), result.message
    assert result.primary_difference.path.startswith("optimizer.state")
    paths = _paths(result)
    count = len(divergence["paths"])
    assert paths[:count] == divergence["paths"]
    assert paths[count:] == ["coverage.epoch0.rank0", "coverage.epoch1.rank0"]


def test_restored_loader_state_passes(results):
    result = results[KEPT]
    assert result.outcome is Outcome.PASS, result.message
    assert result.trajectory["recorded_steps"]["candidate_resume"] == [2, 3, 4, 5, 6, 7, 8]


def test_a_check_run_again_in_its_kept_work_dir_reads_only_its_own_ids(results, kept_work_dir):
    # The first check's records stay in the work_dir: record() once refused to write over
    # them (ERROR), and record_ids, which appends, made them IDs consumed again (FAIL).
    first = results[KEPT]
    assert first.outcome is Outcome.PASS, first.message
    again = _check(KEPT, work_dir=kept_work_dir)
    assert again.outcome is Outcome.PASS, again.message
    assert again.trajectory["recorded_steps"] == first.trajectory["recorded_steps"]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("UnrecordedLoaderStateLostCase", "coverage.epoch0.rank0"),
        ("UnrecordedSkipBeforeSetEpochCase", "coverage.epoch1.rank0"),
        ("UnrecordedEpochBoundaryOrderCase", "coverage.epoch1.rank0"),
    ],
)
def test_without_record_the_answers_stay_at_the_last_step(results, name, path):
    result = results[name]
    total = 6 if "SkipBeforeSetEpoch" in name else 8
    assert _verdict(result) == (Outcome.FAIL, total, path), result.message
    assert result.trajectory is None
    assert "during step" not in result.primary_difference.candidate
    assert _paths(result)[0] == path
    recorded = results[name.removeprefix("Unrecorded")]
    coverage = [path for path in _paths(recorded) if path.startswith("coverage.")]
    assert [path for path in _paths(result) if path.startswith("coverage.")] == coverage
