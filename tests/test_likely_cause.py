"""A FAIL with many differences names the likely cause first: a value training does not change.

Issue 42, finding 8: a script built CosineAnnealingLR(T_max=end_step), so the
run interrupted at step 4 saved T_max 4 where the uninterrupted run had 8.
Without record() the final states differ in many places and the first path in
traversal order is a model tensor; `sched.T_max` explains them all.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from trainparity import Outcome, check_resume
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.reports.html_views import html_fragment
from trainparity._internal.reports.text_views import text_report
from trainparity._internal.state.freeze import freeze
from trainparity._internal.why.likely_cause import (
    CONSTANT_IN_EACH_RUN,
    CONSTANT_IN_RECORDS,
    NOT_A_TENSOR,
    likely_cause,
    scalar_leaves,
)

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "cosine_schedule_train.py"


def _case(*flags: str) -> CommandCase:
    return CommandCase(
        template=[
            sys.executable,
            str(SCRIPT),
            "--checkpoint",
            "{checkpoint}",
            "--end-step",
            "{end_step}",
            "--resume-from",
            "{resume_from?}",
            *flags,
        ],
        checkpoint="{run_dir}/ck.pt",
        split_step=4,
        total_step=8,
    )


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.splitlines()]


def test_a_schedule_length_taken_from_the_end_step_is_named_before_the_tensors_it_moved(
    tmp_path,
):
    result = check_resume(_case(), temporary_root=tmp_path, timeout=120)
    assert result.outcome is Outcome.FAIL, result.message
    # The contract's first divergence stays the first path in traversal order.
    assert result.primary_difference.path == 'model["0.bias"]'
    paths = [item.path for item in result.all_differences]
    assert paths.index("sched.T_max") > paths.index("optimizer.param_groups[0].lr") > 0
    cause = result.likely_cause
    assert (cause.path, cause.baseline, cause.candidate, cause.basis) == (
        "sched.T_max",
        "8",
        "4",
        NOT_A_TENSOR,
    )
    report = result.to_dict()
    assert report["likely_cause"]["path"] == "sched.T_max"
    lines = _lines(text_report(report))
    likely = lines.index(
        "likely cause sched.T_max: 8 in the baseline, 4 in the candidate; it is not a tensor, "
        "so more likely a setting than a result of training (record() per step would show "
        f"whether it stays constant). The {len(paths) - 1} other differences may follow from it"
    )
    # Under the diagnosis, before the finding that names the first path in traversal order.
    assert lines[likely - 2] == "Diagnosis"
    assert lines[likely + 1].startswith("finding the final states differ at step 8; listed first")
    assert (
        lines.count(
            "try next find where sched.T_max gets its value: the runs set it "
            "differently (e.g. from their own end step)"
        )
        == 1
    )
    page = html_fragment(report)
    assert page.index("likely cause") < page.index("listed first is")


def test_with_record_a_setting_from_the_split_runs_end_step_is_named_not_called_noise(tmp_path):
    # candidate_split records T_max 4 from step 0 on: the step order names it first, alone.
    # Issue 53, finding 8: each run holds its T_max constant in every record, so the ABSTAIN
    # names it as the likely cause instead of calling the training nondeterministic.
    result = check_resume(_case("--record"), temporary_root=tmp_path, timeout=120)
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert result.first_divergent_step == 0
    assert [item.path for item in result.all_differences] == ["sched.T_max"]
    assert (result.primary_difference.baseline, result.primary_difference.candidate) == ("8", "4")
    assert result.to_dict()["trajectory"]["first_divergence"]["step"] == 0
    cause = result.likely_cause
    assert (cause.path, cause.baseline, cause.candidate, cause.basis) == (
        "sched.T_max",
        "8",
        "4",
        CONSTANT_IN_EACH_RUN,
    )
    assert "not deterministic" not in result.message
    assert result.message == (
        "candidate_split differs from baseline_a at step 0 in sched.T_max (8 against 4), a value "
        "each run holds constant in every record: a setting the runs compute differently, not "
        "noise. candidate_split runs only to the split step (4), so a setting computed from its "
        "end step differs there: compute it from the total step count instead; resume "
        "attribution is unsafe until then"
    )
    lines = _lines(text_report(result.to_dict()))
    assert (
        "likely cause sched.T_max: 8 in the baseline, 4 in the candidate; each run holds it "
        "constant in every record, so it is a setting the runs compute differently, not noise"
    ) in lines
    assert not any(line.startswith("try next make training deterministic") for line in lines)
    assert (
        "try next find where sched.T_max gets its value: the runs set it differently (e.g. from "
        "their own end step)"
    ) in lines


def test_when_only_tensors_differ_there_is_no_likely_cause(tmp_path):
    result = check_resume(
        _case("--t-max", "8", "--forget-momentum"), temporary_root=tmp_path, timeout=120
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert len(result.all_differences) > 1
    assert {item.reason for item in result.all_differences} == {"tensor_value"}
    assert result.likely_cause is None
    assert "likely_cause" not in result.to_dict()
    assert "likely cause" not in text_report(result.to_dict())


def _scheduler_state(t_max: int, epoch: int) -> dict[str, object]:
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=t_max)
    for _ in range(epoch):
        optimizer.step()
        scheduler.step()
    return {"optimizer": optimizer.state_dict(), "sched": scheduler.state_dict()}


def test_records_tell_a_constant_from_a_value_that_changes_along_training():
    baseline = freeze(_scheduler_state(8, 8))
    candidate = freeze(_scheduler_state(4, 8))
    differences = ExactComparison().compare_all(baseline, candidate)
    # lr, _last_lr and T_max differ; without records the int ranks before the floats.
    assert [item.path for item in differences] == [
        "optimizer.param_groups[0].lr",
        "sched.T_max",
        "sched._last_lr[0]",
    ]
    assert likely_cause(differences, baseline).basis == NOT_A_TENSOR
    records = [scalar_leaves(freeze(_scheduler_state(8, epoch))) for epoch in range(9)]
    cause = likely_cause(differences, baseline, records)
    assert (cause.path, cause.basis) == ("sched.T_max", CONSTANT_IN_RECORDS)
    # A value the records show changing is no cause, whatever its type.
    varying = [{**record, "sched.T_max": index} for index, record in enumerate(records)]
    assert likely_cause(differences, baseline, varying) is None
    assert likely_cause(differences[:1], baseline, records) is None  # one difference: no ranking
