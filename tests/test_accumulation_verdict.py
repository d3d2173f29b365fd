"""The order in which check_accumulation judges its children's observations, on hand-made views.

No process runs here: each child's observations are built as the worker
would publish them, so the rules about step counts can be shown one by one,
and the declarative path (no own train_step) is shown to ignore them.
"""

from __future__ import annotations

from trainparity._internal.accumulation.noise_verdict import judge_noise_observations
from trainparity._internal.accumulation.plan import INITIAL_KEY
from trainparity._internal.accumulation.verdict import (
    Decision,
    disagreement_before_phases,
    judge_observations,
)
from trainparity._internal.comparison.noise_policy import NoiseComparison
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.outcomes import Outcome
from trainparity._internal.state.freeze import freeze
from trainparity._internal.state.snapshot import Snapshot

EXACT = ExactComparison()


def child(
    *, gradient=1.0, optimizer_calls=1, lr=0.5, scheduler_calls=1, last_epoch=1, parameter=2.0
):
    """One child's phase views; the step counts are what an own-step check records."""
    phases = {
        INITIAL_KEY: {"model": {"weight": 0.0}},
        "loss_accounting": {"loss_accounting": {"effective_loss": 3.0}},
        "gradient": {"gradient": {"weight": gradient}},
        "optimizer_state": {"optimizer": {"lr": lr, "step_calls": optimizer_calls}},
        "parameter_update": {"model": {"weight": parameter}},
        "scheduler_state": {"scheduler": {"last_epoch": last_epoch, "step_calls": scheduler_calls}},
    }
    return {phase: Snapshot(1, freeze(tree)) for phase, tree in phases.items()}


def verdict(candidate, *, own_step, baseline_b=None, ranks=()):
    decision = judge_observations(
        EXACT, [child(), baseline_b or child(), candidate], list(ranks), own_step=own_step
    )
    assert decision.outcome is not Outcome.PASS
    paths = [d.path for d in decision.all_differences]
    return decision.first_observed_phase, paths, decision


def test_a_wrong_optimizer_step_count_decides_before_the_gradient_phase():
    wrong = child(gradient=0.25, optimizer_calls=4, lr=0.25)
    phase, paths, decision = verdict(wrong, own_step=True)
    assert phase == "optimizer_state"
    assert paths == ["optimizer.step_calls", "optimizer.lr"]  # the count first, then the rest
    assert decision.message == (
        "first observed divergence in optimizer_state: train_step called optimizer.step "
        "4 times in one update (the reference: 1); not a root-cause claim"
    )


def test_the_declarative_path_keeps_the_contract_order():
    wrong = child(gradient=0.25, optimizer_calls=4, scheduler_calls=2, last_epoch=2)
    assert verdict(wrong, own_step=False)[:2] == ("gradient", ["gradient.weight"])
    wrong = child(scheduler_calls=2, last_epoch=2)
    assert verdict(wrong, own_step=False)[1] == ["scheduler.last_epoch", "scheduler.step_calls"]


def test_baselines_that_count_differently_leave_the_verdict_to_the_phases():
    phase, paths, decision = verdict(
        child(gradient=0.25, optimizer_calls=4), own_step=True, baseline_b=child(optimizer_calls=2)
    )
    assert (phase, paths) == ("gradient", ["gradient.weight"])


def test_a_wrong_scheduler_count_decides_before_the_lr_it_gave_the_optimizer():
    phase, paths, _ = verdict(child(scheduler_calls=2, last_epoch=2), own_step=True)
    assert (phase, paths) == ("scheduler_state", ["scheduler.step_calls", "scheduler.last_epoch"])
    early = child(lr=0.125, parameter=1.5, scheduler_calls=4, last_epoch=4)
    phase, paths, decision = verdict(early, own_step=True)
    assert (phase, paths) == ("scheduler_state", ["scheduler.step_calls", "scheduler.last_epoch"])
    assert "train_step called scheduler.step 4 times in one update" in decision.message
    both = child(optimizer_calls=2, scheduler_calls=4)  # the optimizer's count is judged first
    assert verdict(both, own_step=True)[:2] == ("optimizer_state", ["optimizer.step_calls"])


def test_the_step_count_of_every_rank_is_judged_before_the_ranks_agreement():
    ranks = [child(), child(optimizer_calls=2, parameter=1.0)]
    phase, paths, decision = verdict(ranks[0], own_step=True, ranks=ranks)
    assert (phase, paths) == ("optimizer_state", ["optimizer.step_calls"])
    assert "rank 1's train_step called optimizer.step 2 times" in decision.message


def test_the_scheduler_count_of_every_rank_is_judged_too():
    ranks = [child(), child(scheduler_calls=4, last_epoch=4)]
    phase, paths, decision = verdict(ranks[0], own_step=True, ranks=ranks)
    assert (phase, paths) == ("scheduler_state", ["scheduler.step_calls", "scheduler.last_epoch"])
    assert "rank 1's train_step called scheduler.step 4 times" in decision.message


def test_agreeing_observations_are_a_pass_returned_not_raised():
    decision = judge_observations(EXACT, [child(), child(), child()], [], own_step=True)
    assert decision.outcome is Outcome.PASS
    assert decision.verified_equal_initial_state is True
    assert decision.first_observed_phase is None


def test_the_noise_envelope_returns_the_judgments_before_the_phases_with_its_report():
    wrong = child(optimizer_calls=4)
    decision = judge_noise_observations(
        NoiseComparison(), [child(), child()], wrong, [], own_step=True
    )
    assert isinstance(decision, Decision)
    exact = disagreement_before_phases(EXACT, child(), child(), wrong, [], own_step=True)
    assert decision.first_observed_phase == exact.first_observed_phase == "optimizer_state"
    assert (decision.outcome, decision.message) == (exact.outcome, exact.message)
    assert decision.noise_envelope is not None and decision.noise_envelope["steps"] == []
