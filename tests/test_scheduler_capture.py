"""Every common scheduler's state, and a GradScaler's, is captured and compared exactly.

MultiStepLR keeps its milestones in a Counter with int keys; capture used to
refuse it ("mapping key 2 is not a str"), so check_accumulation ABSTAINed on
one of the most common schedulers. Int (and other plain scalar) keys are now
frozen as they are, written to snapshot files and compared by kind and value.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import torch
import trainparity
from trainparity import Outcome
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.state.freeze import FrozenMapping, freeze
from trainparity._internal.state.normalize import normalize_observation
from trainparity._internal.state.snapshot_capture import capture_snapshot
from trainparity._internal.state.snapshot_file import read_snapshot, write_snapshot
from trainparity._internal.state.tree_codec import SnapshotFileError, decode_tree, encode_tree
from trainparity.api import AccumulationExecutionPlan, check_accumulation

from tests.fixtures.real_loop_cases import SCHEDULERS, SchedulerLoop

REPO_ROOT = Path(__file__).resolve().parents[1]
LOOP = "tests.fixtures.real_loop_cases:SchedulerLoop"


def trained(scheduler: str, steps: int):
    """SchedulerLoop's state after `steps` full-batch updates, as a trainer leaves it."""
    os.environ["REAL_LOOP_SCHEDULER"] = scheduler
    try:
        case = SchedulerLoop()
        state = case.build(3, "cpu")
    finally:
        del os.environ["REAL_LOOP_SCHEDULER"]
    batch = case.batch("cpu")
    for _ in range(steps):
        state.optimizer.zero_grad(set_to_none=True)
        loss = case.loss(state, batch).value
        state.scaler.scale(loss).backward()
        state.scaler.step(state.optimizer)
        state.scaler.update()
        if isinstance(state.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau):
            state.scheduler.step(float(loss.detach()))
        else:
            state.scheduler.step()
    return state


def captured(state):
    result = capture_snapshot(
        state.model, optimizer=state.optimizer, scheduler=state.scheduler, scaler=state.scaler
    )
    assert result.outcome is Outcome.PASS, result.issue
    return result.snapshot


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_every_scheduler_and_the_scaler_are_captured_and_survive_a_snapshot_file(
    tmp_path, scheduler
):
    snapshot = captured(trained(scheduler, 3))
    path = tmp_path / "state.safetensors"
    write_snapshot(path, snapshot.state, step=3)
    again, _ = read_snapshot(path)
    assert ExactComparison().compare_all(snapshot.state, again.state) == ()
    # Deterministic bytes: the same state writes the same file.
    write_snapshot(tmp_path / "again.safetensors", captured(trained(scheduler, 3)).state, step=3)
    assert path.read_bytes() == (tmp_path / "again.safetensors").read_bytes()
    later = captured(trained(scheduler, 4))
    differences = ExactComparison().compare_all(snapshot.state, later.state)
    assert any(difference.path.startswith("scheduler.") for difference in differences)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_a_resume_observation_of_every_scheduler_is_frozen(scheduler):
    """check_resume's observer path: state_dicts normalised (keys as str, §4.3), then frozen."""
    state = trained(scheduler, 2)
    observation = {
        "optimizer": state.optimizer.state_dict(),
        "scheduler": state.scheduler.state_dict(),
        "scaler": state.scaler.state_dict(),
    }
    frozen = freeze(normalize_observation(observation))
    assert isinstance(frozen, FrozenMapping)


def test_milestones_keep_their_int_keys_and_name_them_in_paths():
    state = trained("MultiStepLR", 0)
    snapshot = captured(state)
    milestones = snapshot.state.as_dict()["scheduler"].as_dict()["milestones"]
    assert milestones == FrozenMapping(((1, 1), (3, 1)))
    state.scheduler.milestones = Counter({1: 1, 4: 1})
    differences = ExactComparison().compare_all(snapshot.state, captured(state).state)
    assert [(d.path, d.reason) for d in differences] == [
        ("scheduler.milestones[3]", "missing_candidate"),
        ("scheduler.milestones[4]", "missing_baseline"),
    ]


def test_keys_of_different_kinds_never_pair_up():
    """`2` and `"2"`, `1` and `True` are different keys, though Python finds them equal."""
    differences = ExactComparison().compare_all(
        freeze({"m": {2: "a", 1: "b"}}), freeze({"m": {"2": "a", True: "b"}})
    )
    assert [(d.path, d.reason) for d in differences] == [
        ('m["2"]', "missing_baseline"),
        ("m[True]", "missing_baseline"),
        ("m[1]", "missing_candidate"),
        ("m[2]", "missing_candidate"),
    ]


def test_str_keyed_trees_encode_as_before_and_scalar_keys_round_trip():
    plain, _ = encode_tree(freeze({"b": 1, "a": {"x": None}}))
    assert plain == ["m", [["a", ["m", [["x", ["n"]]]]], ["b", ["i", "1"]]]]
    mixed = freeze({"k": {"s": 0, None: 1, False: 2, -3: 3, 0.5: 4, b"z": 5}})
    tree, _ = encode_tree(mixed)
    assert decode_tree(tree, []) == mixed
    unsorted = ["k", [[["i", "4"], ["n"]], [["i", "2"], ["n"]]]]
    with pytest.raises(SnapshotFileError, match="not sorted"):
        decode_tree(unsorted, [])
    with pytest.raises(SnapshotFileError, match="mapping key of kind"):
        decode_tree(["k", [[["l", []], ["n"]]]], [])


def test_check_accumulation_captures_multistep_lr_and_its_scaler(tmp_path):
    """Used to ABSTAIN: "initial state capture failed: … mapping key 1 is not a str"."""
    result = check_accumulation(
        LOOP,
        candidate=AccumulationExecutionPlan(1, clip_grad_norm=0.5),
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        environment={"REAL_LOOP_SCHEDULER": "MultiStepLR"},
    )
    assert result.outcome is Outcome.PASS, result.message


def test_check_accumulation_steps_reduce_on_plateau_with_the_loss(tmp_path):
    """The reference steps ReduceLROnPlateau with the update's loss (it takes a metric)."""
    result = check_accumulation(
        LOOP,
        candidate=AccumulationExecutionPlan(1, clip_grad_norm=0.5),
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        environment={"REAL_LOOP_SCHEDULER": "ReduceLROnPlateau"},
    )
    assert result.outcome is Outcome.PASS, result.message


@pytest.mark.parametrize("scheduler", ["MultiStepLR", "SequentialLR", "ReduceLROnPlateau"])
def test_check_resume_captures_the_scheduler_and_its_scaler(tmp_path, scheduler):
    result = trainparity.check_resume(
        "tests.fixtures.real_loop_cases:SchedulerResumeCase",
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
        environment={"REAL_LOOP_SCHEDULER": scheduler},
    )
    assert result.outcome is Outcome.PASS, result.message
