"""check_accumulation of a case's own train_step, end to end with real fresh processes.

The candidate child calls the case's `train_step` on the microbatches the
splitter produced; the two baselines run the full batch through the
reference update. A correct loop PASSes; each bug real loops ship FAILs at
the phase and path where it is first observed; a step that raises or
returns the wrong thing is an ERROR that points at the child's stderr.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from trainparity._internal.accumulation.check import AccumulationExecutionPlan, check_accumulation
from trainparity._internal.comparison.policies import ToleranceComparison

REPOSITORY = Path(__file__).resolve().parent.parent
TOLERANCE = ToleranceComparison(rtol=1e-5, atol=1e-6)
ONE_THREAD = {"OMP_NUM_THREADS": "1"}

# Two of the loops step the scheduler before the optimizer, on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")


def check(case: str, plan: AccumulationExecutionPlan | None = None, **options):
    options.setdefault("comparison", TOLERANCE)
    options.setdefault("timeout", 240)
    return check_accumulation(
        f"tests.fixtures.own_step_cases:{case}",
        candidate=plan or AccumulationExecutionPlan(2),
        cwd=REPOSITORY,
        environment=ONE_THREAD,
        **options,
    )


def assert_three_fresh_children(result) -> None:
    assert len(set(result.process_ids)) == 3 and os.getpid() not in result.process_ids
    assert result.verified_equal_initial_state is True


def test_a_correct_own_loop_passes_and_its_losses_are_compared():
    result = check("TokenLoopCase")
    assert result.outcome == "PASS", result.message
    assert result.message == "declared executions are equivalent for one optimizer-update boundary"
    assert result.loss_normalization_captured is True
    assert_three_fresh_children(result)


def test_a_correct_loop_that_reports_no_losses_passes_without_the_loss_phase():
    result = check("SilentTokenLoopCase", AccumulationExecutionPlan(4))
    assert result.outcome == "PASS", result.message
    assert result.loss_normalization_captured is False  # nothing was reported to capture
    assert "train_step returned no LossAccounting" in result.message
    assert_three_fresh_children(result)


def test_clipping_once_after_the_window_passes_against_the_clipping_reference():
    result = check("ClipOnceCase", AccumulationExecutionPlan(2, clip_grad_norm=0.5))
    assert result.outcome == "PASS", result.message


# The bugs: (case, plan, phase, primary path, every path of that phase) ---------------------


OWN_LOOP_FAULTS = [
    pytest.param(
        "MicrobatchMeanCase",
        AccumulationExecutionPlan(2),
        "loss_accounting",
        ["loss_accounting.effective_loss"],
        id="token-mean-per-microbatch",
    ),
    pytest.param(
        "SilentMicrobatchMeanCase",
        AccumulationExecutionPlan(2),
        "gradient",
        ['gradient["0"].weight', 'gradient["1"].bias', 'gradient["1"].weight'],
        id="token-mean-per-microbatch-unreported",
    ),
    pytest.param(
        "ZeroGradPerMicrobatchCase",
        AccumulationExecutionPlan(2),
        "gradient",
        ['gradient["0"].weight', 'gradient["1"].bias', 'gradient["1"].weight'],
        id="zero-grad-in-the-loop",
    ),
]


@pytest.mark.parametrize(("case", "plan", "phase", "paths"), OWN_LOOP_FAULTS)
def test_own_loop_bugs_fail_where_first_observed(case, plan, phase, paths):
    result = check(case, plan)
    assert result.outcome == "FAIL", result.message
    assert result.first_observed_phase == phase
    assert result.message == f"first observed divergence in {phase}; not a root-cause claim"
    assert [difference.path for difference in result.all_differences] == paths
    assert result.primary_difference == result.all_differences[0]
    assert_three_fresh_children(result)


def test_clipping_per_microbatch_fails_at_the_clipping_calls_before_the_gradients():
    """The clipping calls before optimizer.step are observed with the gradients, and sort first."""
    result = check("ClipPerMicrobatchCase", AccumulationExecutionPlan(2, clip_grad_norm=0.5))
    assert result.outcome == "FAIL", result.message
    assert result.first_observed_phase == "gradient"
    assert result.message == (
        "first observed divergence in gradient: train_step clipped the gradients 2 times before "
        "optimizer.step (the reference: once, after the last backward); not a root-cause claim"
    )
    assert [difference.path for difference in result.all_differences] == [
        "clipping.calls",
        "clipping.total_norm",
        'gradient["0"].weight',
        'gradient["1"].bias',
        'gradient["1"].weight',
    ]
    assert_three_fresh_children(result)


# A wrong step count decides before any phase: (case, plan, component, calls, every path) ---


STEP_COUNTS = [
    pytest.param(
        "OptimizerStepPerMicrobatchCase",
        AccumulationExecutionPlan(4),
        "optimizer",
        4,
        [
            "optimizer.step_calls",
            'optimizer.state["0"].weight.momentum_buffer',
            'optimizer.state["1"].bias.momentum_buffer',
            'optimizer.state["1"].weight.momentum_buffer',
        ],
        id="optimizer-step-per-microbatch",  # its gradients differ too, but are not compared
    ),
    pytest.param(
        "DoubleOptimizerStepCase",
        AccumulationExecutionPlan(2),
        "optimizer",
        2,
        ["optimizer.step_calls"],
        id="second-optimizer-step",
    ),
    pytest.param(
        "NeverStepsCase",
        AccumulationExecutionPlan(2),
        "optimizer",
        0,
        [
            "optimizer.step_calls",
            "optimizer.param_groups[0].lr",
            'optimizer.state["0"].weight.momentum_buffer',
            'optimizer.state["1"].bias.momentum_buffer',
            'optimizer.state["1"].weight.momentum_buffer',
        ],
        id="never-steps",  # a FAIL, not an ERROR: it ran, and was observed
    ),
    pytest.param(
        "SchedulerPerMicrobatchCase",
        AccumulationExecutionPlan(4),
        "scheduler",
        4,
        [
            "scheduler.step_calls",
            "scheduler._last_lr[0]",
            "scheduler._step_count",
            "scheduler.last_epoch",
        ],
        id="scheduler-per-microbatch",  # before the decayed lr the optimizer stepped with
    ),
    pytest.param(
        "DoubleSchedulerStepCase",
        AccumulationExecutionPlan(2),
        "scheduler",
        2,
        [
            "scheduler.step_calls",
            "scheduler._last_lr[0]",
            "scheduler._step_count",
            "scheduler.last_epoch",
        ],
        id="second-scheduler-step",
    ),
]


@pytest.mark.parametrize(("case", "plan", "component", "calls", "paths"), STEP_COUNTS)
def test_a_wrong_step_count_fails_at_the_count_before_any_phase(
    case, plan, component, calls, paths
):
    result = check(case, plan)
    assert result.outcome == "FAIL", result.message
    phase = f"{component}_state"
    assert result.first_observed_phase == phase
    assert result.message == (
        f"first observed divergence in {phase}: train_step called {component}.step "
        f"{calls} times in one update (the reference: 1); not a root-cause claim"
    )
    assert [difference.path for difference in result.all_differences] == paths
    count = result.primary_difference
    assert count == result.all_differences[0]
    assert (count.path, count.baseline, count.candidate) == (
        f"{component}.step_calls",
        "1",
        str(calls),
    )
    assert_three_fresh_children(result)
    if case == "NeverStepsCase":
        missing = result.all_differences[2]
        assert missing.candidate == "<missing>"


# ERROR and setup errors -------------------------------------------------------------------


def test_a_raising_step_is_an_error_naming_the_child_and_quoting_its_stderr(tmp_path):
    result = check("RaisingStepCase", temporary_root=tmp_path)
    assert result.outcome == "ERROR"
    first, *rest = result.message.split("\n")
    assert first == (
        "worker failed: RuntimeError: train_step exploded on purpose "
        "(raised by case.train_step() in candidate)"
    )
    assert rest[0].endswith(" lines of candidate's stderr:")
    assert rest[-2:] == [
        "  RuntimeError: train_step exploded on purpose",
        "full log: removed with the run directory; pass work_dir (--work-dir) to keep it",
    ]
    assert result.first_observed_phase is None
    assert list(tmp_path.iterdir()) == []


def test_a_raising_step_keeps_its_traceback_in_the_work_dir(tmp_path):
    result = check("RaisingStepCase", work_dir=tmp_path)
    assert result.message.endswith(f"\nfull log: {tmp_path / 'candidate' / 'stderr.log'}")
    log = (tmp_path / "candidate" / "stderr.log").read_text()
    assert "in train_step" in log and "train_step exploded on purpose" in log


@pytest.mark.parametrize(
    ("case", "detail"),
    [
        (
            "DictReturningStepCase",
            "case.train_step() must return None or a sequence of LossAccounting "
            "(one per microbatch it back-propagated), got dict",
        ),
    ],
)
def test_a_step_returning_the_wrong_type_is_an_error_saying_what_is_accepted(case, detail):
    result = check(case)
    assert result.outcome == "ERROR"
    assert result.message.startswith(
        f"worker failed: TypeError: {detail} (returned by case.train_step() in candidate)"
    )


def test_a_declarative_fault_flag_with_an_own_step_is_a_setup_error():
    result = check("TokenLoopCase", AccumulationExecutionPlan(2, omit_final_microbatch=True))
    assert result.outcome == "ERROR"
    assert result.message == (
        "case setup failed: the case defines train_step, so the candidate runs "
        "that step, not the plan's loop; leave omit_final_microbatch at the default"
    )
    assert result.process_ids == ()
