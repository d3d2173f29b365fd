"""A resume that fast-forwards its loader by iterating past consumed batches is not a repeat (issue 50).

The docs' recipe `itertools.islice(loader, trained_this_epoch, None)` over a
`track_ids` loader draws the skipped batches, so the resumed phase's record
begins with them again. check_resume once read that as samples consumed
again and FAILed a bit-exact resume. Now a replay of exactly the IDs
consumed before the resume, with no training step before the next ID, is
read as the fast-forward it is; a resume that trains on those batches again
still FAILs at coverage, at the replayed position.

The real checks (tests/fixtures/fast_forward_cases.py: dropout, AdamW, a
shuffled DataLoader with 0 or 2 workers, a checkpoint every 3 steps,
auto-resume from the newest) run warm, in one module fixture; the rule
itself is tested on records written in this process, between real
optimizer steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import trainparity
from trainparity import ExactlyOnce, Outcome
from trainparity._internal.coverage.recorded_ids import audit_recorded_chain
from trainparity._internal.recording.record_ids import flush_ids, mark_step, record_ids
from trainparity._internal.reports.diagnosis import diagnosis_rows
from trainparity._internal.resume.sample_order import chain_coverage_differences

REPO_ROOT = Path(__file__).resolve().parents[1]
CASES = "tests.fixtures.fast_forward_cases"
WARM = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",  # one shared warm server
    "TRAINPARITY_WARM_PRELOAD": "torch._dynamo",
}
NAMES = (
    "FastForwardCase",
    "UnrecordedFastForwardCase",
    "WorkersFastForwardCase",
    "EpochEndFastForwardCase",
    "ReplayCase",
    "UnrecordedReplayCase",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("fast_forward")
    with trainparity.shared_warm_servers(max_idle=4):
        return {
            name: trainparity.check_resume(
                f"{CASES}:{name}",
                cwd=REPO_ROOT,
                environment=WARM,
                start="warm",
                temporary_root=root,
                timeout=600,  # a phase's limit: generous, so a loaded machine cannot change a verdict
            )
            for name in NAMES
        }


@pytest.mark.parametrize(
    "name",
    [
        "FastForwardCase",
        "UnrecordedFastForwardCase",
        "WorkersFastForwardCase",
        "EpochEndFastForwardCase",
    ],
)
def test_the_islice_fast_forward_passes(results, name):
    result = results[name]
    assert result.outcome is Outcome.PASS, (result.message, result.primary_difference)
    assert result.all_differences == ()


@pytest.mark.parametrize(("name", "step"), [("ReplayCase", 10), ("UnrecordedReplayCase", 11)])
def test_a_resume_that_trains_the_epoch_again_fails_at_the_replayed_position(results, name, step):
    result = results[name]
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == step  # without record(): the last step
    primary = result.primary_difference
    assert primary.path == "coverage.epoch1.rank0"
    assert primary.reason == "sample_repeated"
    # Split after 3 batches of 4 IDs in epoch 1: the resumed run's first ID is epoch 1's first.
    assert "consumed again at position 12 of epoch 1 on rank 0 (candidate_resume's position 0" in (
        primary.candidate
    )
    assert "first consumed at position 0" in primary.candidate
    assert ("during step 10" in primary.candidate) is (name == "ReplayCase")


# The rule on records written here: 6 batches of 2 IDs, an optimizer step after each trained one.

BATCHES = [[2 * batch, 2 * batch + 1] for batch in range(6)]


class _Trainer:
    """A real optimizer whose step() the records count (torch.optim's global step hook)."""

    def __init__(self) -> None:
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.optimizer = torch.optim.SGD([self.weight], lr=0.1)

    def step(self) -> None:
        self.weight.grad = torch.ones(1)
        self.optimizer.step()


def _write(directory: Path, drawn: list[list[int]], trained: list[bool], marks: bool = False):
    """Record each drawn batch; after a trained one, an optimizer step (and mark_step, as record())."""
    trainer = _Trainer()
    for number, (batch, was_trained) in enumerate(zip(drawn, trained, strict=True)):
        record_ids(batch, epoch=0, directory=directory, rank=0)
        if was_trained:
            trainer.step()
            if marks:
                mark_step(number + 1)
    flush_ids()


def _differences(tmp_path: Path, resumed: list[list[int]], trained: list[bool], **how):
    _write(tmp_path / "baseline_a", BATCHES, [True] * 6, **how)
    _write(tmp_path / "candidate_split", BATCHES[:3], [True] * 3, **how)
    _write(tmp_path / "candidate_resume", resumed, trained, **how)
    phases = [(name, tmp_path / name) for name in ("candidate_split", "candidate_resume")]
    return chain_coverage_differences(tmp_path / "baseline_a", phases)


def test_a_replay_drawn_before_the_first_step_is_a_fast_forward(tmp_path):
    assert _differences(tmp_path, BATCHES, [False] * 3 + [True] * 3) == []


def test_a_replay_trained_on_again_is_consumed_again(tmp_path):
    (found,) = _differences(tmp_path, BATCHES + BATCHES[:3], [True] * 9)
    assert found.difference.reason == "sample_repeated"
    assert "ID 0 consumed again at position 6 of epoch 0 on rank 0 " in found.difference.candidate
    assert "(candidate_resume's position 0)" in found.difference.candidate


def test_a_replay_with_nothing_after_it_was_trained_on(tmp_path):
    # A loop that records each batch after its step (the HF integration does): the resumed run
    # trains the consumed batches again and stops; no later ID shows a fast-forward.
    (found,) = _differences(tmp_path, BATCHES[:3], [True] * 3)
    assert found.difference.reason == "sample_repeated"
    assert "(candidate_resume's position 0)" in found.difference.candidate


def test_a_fast_forward_one_batch_short_is_not_mistaken_for_one(tmp_path):
    # Skips batches 0 and 1, trains batch 2 again: the replay spans a step.
    (found,) = _differences(tmp_path, BATCHES, [False, False, True, True, True, True])
    assert found.difference.reason == "sample_repeated"
    assert "(candidate_resume's position 0)" in found.difference.candidate


def test_a_fast_forward_that_skips_too_little_is_named_after_its_replay(tmp_path):
    # A replay of the consumed prefix, then batch 2 once more: the extra one is the repeat.
    resumed = [*BATCHES[:3], BATCHES[2], *BATCHES[3:]]
    (found,) = _differences(tmp_path, resumed, [False] * 3 + [True] * 4)
    assert found.difference.reason == "sample_repeated"
    assert "ID 4 consumed again at position 6 of epoch 0" in found.difference.candidate
    assert "(candidate_resume's position 6, after the 6 IDs it drew to fast-forward)" in (
        found.difference.candidate
    )


@pytest.mark.parametrize(("replay_trained", "found"), [(False, []), (True, ["sample_repeated"])])
def test_a_replay_of_a_whole_epoch_is_judged_by_the_next_epochs_first_batch(
    tmp_path, replay_trained, found
):
    """Split on an epoch's last step: the resume draws that whole epoch again to skip it."""
    trainer = _Trainer()

    def run(directory: Path, epochs: list[tuple[int, list[list[int]], bool]]) -> None:
        for epoch, batches, trained in epochs:
            for batch in batches:
                record_ids(batch, epoch=epoch, directory=directory, rank=0)
                if trained:
                    trainer.step()
        flush_ids()

    run(tmp_path / "baseline_a", [(0, BATCHES, True), (1, BATCHES[:2], True)])
    run(tmp_path / "candidate_split", [(0, BATCHES, True)])
    run(tmp_path / "candidate_resume", [(0, BATCHES, replay_trained), (1, BATCHES[:2], True)])
    phases = [(name, tmp_path / name) for name in ("candidate_split", "candidate_resume")]
    differences = chain_coverage_differences(tmp_path / "baseline_a", phases)
    assert [placed.difference.reason for placed in differences] == found


def test_without_optimizer_steps_record_calls_tell_a_replay_from_a_retraining(tmp_path):
    """A process whose optimizer torch.optim does not count: the record() marks decide."""

    def without_steps(directory, drawn, trained, marks=False):
        for number, (batch, was_trained) in enumerate(zip(drawn, trained, strict=True)):
            record_ids(batch, epoch=0, directory=directory, rank=0)
            if was_trained:
                mark_step(number + 1)
        flush_ids()

    def differences(root, resumed, trained):
        without_steps(root / "baseline_a", BATCHES, [True] * 6)
        without_steps(root / "candidate_split", BATCHES[:3], [True] * 3)
        without_steps(root / "candidate_resume", resumed, trained)
        phases = [(name, root / name) for name in ("candidate_split", "candidate_resume")]
        return chain_coverage_differences(root / "baseline_a", phases)

    (tmp_path / "skip").mkdir()
    (tmp_path / "again").mkdir()
    assert differences(tmp_path / "skip", BATCHES, [False] * 3 + [True] * 3) == []
    (found,) = differences(tmp_path / "again", BATCHES, [True] * 6)
    assert found.difference.reason == "sample_repeated"


def test_a_replay_of_other_ids_than_the_consumed_ones_is_no_fast_forward(tmp_path):
    # The resumed loader restarted its epoch in another order: not a replay of the prefix.
    resumed = [BATCHES[1], BATCHES[0], BATCHES[2], *BATCHES[3:]]
    (found,) = _differences(tmp_path, resumed, [False] * 3 + [True] * 3)
    assert found.difference.reason == "sample_repeated"


@pytest.mark.parametrize(
    ("trained", "outcome"),
    [([False] * 3 + [True] * 3, "PASS"), ([True] * 6 + [True] * 3, "FAIL")],
)
def test_the_chain_coverage_audit_leaves_a_fast_forward_out_too(tmp_path, trained, outcome):
    _write(tmp_path / "a", BATCHES[:3], [True] * 3)
    _write(tmp_path / "b", (BATCHES + BATCHES[:3])[: len(trained)], trained)
    (result,) = audit_recorded_chain(
        [tmp_path / "a", tmp_path / "b"], policy=ExactlyOnce(range(12))
    ).values()
    assert result.outcome == outcome, result
    if outcome == "FAIL":  # trained on epoch 0's first batches again: consumed twice
        assert result.first_violation.kind == "same_rank_duplicate"


def _coverage_only_report(trajectory: object) -> dict:
    difference = {
        "path": "coverage.epoch1.rank0",
        "reason": "sample_repeated",
        "baseline": "ID 17 at position 12",
        "candidate": "ID 9 consumed again at position 12",
    }
    return {
        "outcome": "FAIL",
        "fresh_resume_processes_distinct": True,
        "first_divergent_step": 11,
        "all_differences": [difference],
        "trajectory": trajectory,
    }


def test_the_record_per_step_hint_shows_only_when_record_was_not_called():
    recorded = dict(diagnosis_rows(_coverage_only_report({"first_divergence": None})))
    assert "record() per step" not in recorded["finding"]
    assert "equal at every recorded step" in recorded["finding"]
    unrecorded = dict(diagnosis_rows(_coverage_only_report(None)))
    assert "(record() per step finds the first step)" in unrecorded["finding"]
