"""check_accumulation without children: plans, batch splitting, arguments, setup errors, reports.

ANCHOR_CASES §2.3 (A1–A4, A6–A8) and CONTRACT §7.1, §7.3, §7.4, §7.10. The
file also runs against TrainParity 0.1.0 (black box, its own venv); tests of
our deliberate differences skip there.
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import io
import json
import os
from collections import namedtuple
from pathlib import Path

import pytest
import torch
import trainparity
import trainparity._internal.accumulation.check as accumulation
import trainparity.api
from trainparity._internal.accumulation.check import (
    AccumulationExecutionPlan,
    AccumulationRunner,
    UnsafeBatchSplit,
    split_tensor_tree,
)
from trainparity._internal.comparison.policies import ExactComparison, ToleranceComparison
from trainparity.protocols import TrainingState

ORIGINAL = trainparity.__version__ == "0.1.0"
ours_only = pytest.mark.skipif(ORIGINAL, reason="a deliberate difference from 0.1.0")

# 0.1.0 defines check_accumulation in trainparity.api only; here it lives in trainparity.accumulation.
check_accumulation = (
    getattr(accumulation, "check_accumulation", None) or trainparity.api.check_accumulation
)

REPOSITORY = Path(__file__).resolve().parent.parent
MISSING_CASE = "tests.fixtures.accumulation_cases:MissingAccumulationCase"
CONTRACT_PARAMETERS = [
    "case",
    "candidate",
    "comparison",
    "device",
    "seed",
    "cwd",
    "report_path",
    "environment",
    "timeout",
    "temporary_root",
]


# Plans ----------------------------------------------------------------------------------


def test_plan_defaults_and_to_dict():
    plan = AccumulationExecutionPlan(2)
    assert plan.to_dict() == {
        "microbatch_count": 2,
        "scale_accumulated_loss": True,
        "use_explicit_loss_accounting": True,
        "optimizer_step_per_microbatch": False,
        "scheduler_step_per_microbatch": False,
        "zero_grad_before_gradient_observation": False,
        "clip_grad_norm": None,
        "clip_per_microbatch": False,
        "amp_step_before_unscale": False,
        "omit_final_microbatch": False,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.microbatch_count = 3


def test_plan_validation_rejects_non_positive_values():  # A4
    with pytest.raises(ValueError, match="microbatch_count must be positive"):
        AccumulationExecutionPlan(0).validate()
    with pytest.raises(ValueError, match="clip_grad_norm must be positive"):
        AccumulationExecutionPlan(2, clip_grad_norm=0).validate()
    AccumulationExecutionPlan(3, clip_grad_norm=0.5).validate()


def test_plan_round_trips_through_from_dict():
    plan = AccumulationExecutionPlan(3, clip_grad_norm=1.0, clip_per_microbatch=True)
    assert AccumulationExecutionPlan.from_dict(plan.to_dict()) == plan
    assert AccumulationExecutionPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_from_dict_requires_exactly_the_ten_fields_and_revalidates():
    fields = AccumulationExecutionPlan(2).to_dict()
    with pytest.raises(ValueError):
        AccumulationExecutionPlan.from_dict({key: fields[key] for key in list(fields)[1:]})
    with pytest.raises(ValueError):
        AccumulationExecutionPlan.from_dict({**fields, "extra_flag": True})
    with pytest.raises(ValueError, match="microbatch_count must be positive"):
        AccumulationExecutionPlan.from_dict({**fields, "microbatch_count": 0})


@ours_only
def test_per_microbatch_clipping_needs_a_norm():
    with pytest.raises(ValueError, match="clip_per_microbatch needs clip_grad_norm"):
        AccumulationExecutionPlan(2, clip_per_microbatch=True).validate()


@ours_only
def test_plan_validation_rejects_wrong_types():
    for plan in (
        AccumulationExecutionPlan("2"),
        AccumulationExecutionPlan(2.0),
        AccumulationExecutionPlan(True),
        AccumulationExecutionPlan(2, omit_final_microbatch="yes"),
        AccumulationExecutionPlan(2, clip_grad_norm="1.0"),
    ):
        with pytest.raises(TypeError):
            plan.validate()
    with pytest.raises(ValueError, match="clip_grad_norm must be positive"):
        AccumulationExecutionPlan(2, clip_grad_norm=float("nan")).validate()


# Batch splitting ------------------------------------------------------------------------


def test_split_keeps_structure_and_order():  # A2
    batch = {
        "tokens": torch.arange(12).reshape(4, 3),
        "nested": (torch.arange(4), [torch.arange(8).reshape(4, 2)]),
    }
    first, second = split_tensor_tree(batch, 2)
    assert isinstance(first, dict)
    assert torch.equal(first["tokens"], torch.arange(6).reshape(2, 3))
    assert isinstance(second["nested"], tuple) and isinstance(second["nested"][1], list)
    assert torch.equal(second["nested"][1][0], torch.arange(8).reshape(4, 2)[2:])
    assert torch.equal(second["nested"][0], torch.tensor([2, 3]))


def test_split_sizes_follow_tensor_split():
    parts = split_tensor_tree(torch.arange(7), 3)
    assert [part.tolist() for part in parts] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [part.tolist() for part in split_tensor_tree(torch.arange(3), 3)] == [[0], [1], [2]]
    (whole,) = split_tensor_tree([torch.arange(2)], 1)
    assert isinstance(whole, list) and torch.equal(whole[0], torch.arange(2))


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (torch.tensor(1.0), "scalar tensor leaf has no batch dimension"),
        ({"x": torch.ones(3), "y": torch.ones(2)}, "one equal non-zero leading length"),
        (object(), "unsupported batch leaf: object"),
        ({}, "mapping leaves must be non-empty and string-keyed"),
        ({1: torch.ones(2)}, "mapping leaves must be non-empty and string-keyed"),
        ({"metadata": ["a", "b"]}, "unsupported batch leaf: str"),
        ([], "sequence batch must be non-empty"),
        (torch.ones(0, 2), "one equal non-zero leading length"),
        (torch.ones(1, 2), "microbatch count exceeds batch length"),
    ],
)
def test_unsafe_batches_raise(batch, message):  # A3
    with pytest.raises(UnsafeBatchSplit, match=message):
        split_tensor_tree(batch, 2)
    assert issubclass(UnsafeBatchSplit, ValueError)


def test_split_rejects_non_positive_parts():
    with pytest.raises(UnsafeBatchSplit, match="parts must be positive"):
        split_tensor_tree(torch.ones(2), 0)


def test_split_copies_rather_than_views():
    batch = torch.arange(4.0)
    first, _ = split_tensor_tree(batch, 2)
    batch.add_(10)
    assert first.tolist() == [0.0, 1.0]


@ours_only
def test_split_keeps_named_tuples():
    Pair = namedtuple("Pair", "inputs targets")
    first, second = split_tensor_tree(Pair(torch.arange(4), torch.arange(4) * 2), 2)
    assert isinstance(first, Pair)
    assert second.targets.tolist() == [4, 6]


# Arguments ------------------------------------------------------------------------------


def test_runner_arguments():  # A4
    for comparison in (object(), None):  # the runner needs an explicit policy
        with pytest.raises(TypeError, match="comparison must be explicit"):
            AccumulationRunner(comparison=comparison)
    AccumulationRunner(comparison=ExactComparison())
    AccumulationRunner(comparison=ToleranceComparison(rtol=0, atol=0))
    with pytest.raises(ValueError, match="timeout must be positive"):
        AccumulationRunner(comparison=ExactComparison(), timeout=0)


def test_check_validates_comparison_before_timeout():
    plan = AccumulationExecutionPlan(2)
    for bad in ("exact", {"rtol": 0}, 1e-6, lambda a, b: True):
        with pytest.raises(TypeError, match="comparison must be explicit"):
            check_accumulation(MISSING_CASE, candidate=plan, comparison=bad, timeout=0)
    with pytest.raises(ValueError, match="timeout must be positive"):
        check_accumulation(MISSING_CASE, candidate=plan, timeout=-1)


def test_signature():  # A8
    parameters = inspect.signature(check_accumulation).parameters
    names = list(parameters)
    extras = [] if ORIGINAL else ["work_dir", "parallel", "progress", "start"]
    assert names == CONTRACT_PARAMETERS + extras
    assert parameters["candidate"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["candidate"].default is inspect.Parameter.empty
    assert parameters["comparison"].default is None
    assert (parameters["device"].default, parameters["seed"].default) == ("cpu", 23)
    assert parameters["timeout"].default == 300.0


def test_training_state_scheduler_is_optional():  # A1
    model = torch.nn.Linear(2, 1)
    state = TrainingState(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    assert state.scheduler is None and state.scaler is None and state.step == 0


@ours_only
def test_non_plan_candidates_raise_type_error_before_anything_runs(tmp_path):
    for candidate in (None, 2, {"microbatch_count": 2}):
        with pytest.raises(TypeError, match="AccumulationExecutionPlan"):
            check_accumulation(MISSING_CASE, candidate=candidate, temporary_root=tmp_path)
    with pytest.raises(TypeError, match="microbatch_count must be an int"):
        check_accumulation(
            MISSING_CASE, candidate=AccumulationExecutionPlan("2"), temporary_root=tmp_path
        )
    assert list(tmp_path.iterdir()) == []


# Setup errors and reports ---------------------------------------------------------------


def test_missing_case_is_a_setup_error_with_identical_reports(tmp_path, monkeypatch):  # A6
    renames = []
    real_replace = os.replace

    def spy_replace(source, target, *args, **kwargs):  # Path.replace goes through os.replace too
        renames.append((Path(source).name, Path(target).name))
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", spy_replace)
    results = []
    for name in ("first.json", "second.json"):
        result = check_accumulation(
            MISSING_CASE, candidate=AccumulationExecutionPlan(2), report_path=tmp_path / name
        )
        results.append(result)
        assert result.outcome == "ERROR"
        assert result.message.startswith("case setup failed: cannot import case")
        assert result.usage_error == "case"
        assert MISSING_CASE in result.message and "MissingAccumulationCase" in result.message
        assert "Traceback" not in result.message
        assert result.equivalence == "" and result.process_ids == ()
        assert result.peak_temporary_directory_bytes == 0
        assert_report_matches(result, tmp_path / name)
    assert results[0].to_dict() == results[1].to_dict()
    assert (tmp_path / "first.json").read_bytes() == (tmp_path / "second.json").read_bytes()
    assert renames == [("first.json.tmp", "first.json"), ("second.json.tmp", "second.json")]


def test_reports_are_written_as_bytes(tmp_path, monkeypatch):  # A7
    real_open = builtins.open

    def translating_open(file, mode="r", *args, **kwargs):
        if "w" in mode and "b" not in mode:
            kwargs["newline"] = "\r\n"
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", translating_open)
    monkeypatch.setattr(io, "open", translating_open)
    report = tmp_path / "nested" / "report.json"
    result = check_accumulation(
        MISSING_CASE, candidate=AccumulationExecutionPlan(2), report_path=report
    )
    assert b"\r\n" not in report.read_bytes()
    assert_report_matches(result, report)


def assert_report_matches(result, path: Path) -> None:
    data = path.read_bytes()
    assert data == (json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n").encode("utf-8")
    assert result.persisted_artifact_bytes == len(data)
    assert json.loads(data)["persisted_artifact_bytes"] == len(data)
    assert not path.with_name(path.name + ".tmp").exists()


def test_invalid_plan_is_a_setup_error(tmp_path):
    result = check_accumulation(
        "tests.fixtures.accumulation_cases:LinearCase",
        candidate=AccumulationExecutionPlan(0),
        report_path=tmp_path / "report.json",
    )
    assert result.outcome == "ERROR"
    assert result.message == "case setup failed: microbatch_count must be positive"
    assert result.usage_error == "candidate"
    assert_report_matches(result, tmp_path / "report.json")


def test_blank_equivalence_is_a_setup_error():
    result = check_accumulation(
        "tests.fixtures.accumulation_cases:BlankEquivalenceCase",
        candidate=AccumulationExecutionPlan(2),
    )
    assert result.outcome == "ERROR"
    assert result.message == (
        "case setup failed: case must declare a non-empty equivalence relation"
    )
    assert result.equivalence == ""


def test_setup_error_report_keys():
    result = check_accumulation(MISSING_CASE, candidate=AccumulationExecutionPlan(2))
    report = result.to_dict()
    assert list(report)[:2] == ["schema_version", "trainparity_version"]
    assert report["schema_version"] == 2
    assert report["trainparity_version"] == trainparity.__version__
    assert set(report) == {
        "schema_version",
        "trainparity_version",
        "outcome",
        "message",
        "case",
        "equivalence",
        "first_observed_phase",
        "primary_difference",
        "all_differences",
        "process_ids",
        "verified_equal_initial_state",
        "loss_normalization_captured",
        "comparison_policy",
        "peak_temporary_directory_bytes",
        "persisted_artifact_bytes",
    } | ({"environment"} if trainparity.__version__ != "0.1.0" else set())


@ours_only
def test_setup_error_reports_the_declared_policy():
    result = check_accumulation(
        MISSING_CASE,
        candidate=AccumulationExecutionPlan(2),
        comparison=ToleranceComparison(rtol=1e-6, atol=1e-7),
    )
    assert result.comparison_policy == "explicit_tolerance"


@ours_only
def test_non_string_equivalence_is_a_setup_error():
    result = check_accumulation(
        "tests.fixtures.accumulation_cases:NumericEquivalenceCase",
        candidate=AccumulationExecutionPlan(2),
    )
    assert result.outcome == "ERROR"
    assert result.message.startswith("case setup failed: case equivalence must be a str")
    assert result.usage_error == "equivalence"


@ours_only
def test_report_size_fixpoint_converges_for_any_starting_size(tmp_path):
    from trainparity._internal.accumulation.check import write_accumulation_report
    from trainparity._internal.accumulation.result import AccumulationResult
    from trainparity.outcomes import Outcome

    for start in (0, 9, 99999):
        result = AccumulationResult(
            outcome=Outcome.PASS,
            message="m",
            case="c",
            equivalence="e",
            persisted_artifact_bytes=start,
        )
        written = write_accumulation_report(result, tmp_path / f"{start}.json")
        assert_report_matches(written, tmp_path / f"{start}.json")


@ours_only
def test_children_run_concurrently_by_default_except_on_cuda():
    from trainparity._internal.processes.check_runner import wants_parallel

    assert wants_parallel(None, "cuda") is False
    assert wants_parallel(None, "cuda:1") is False
    assert wants_parallel(None, "cpu") is (len(os.sched_getaffinity(0)) > 1)
    assert wants_parallel(True, "cuda") is True
    assert wants_parallel(False, "cpu") is False
