"""check_accumulation on loops written as trainers write them: AdamW, warmup+cosine, clipping, dropout.

A correct loop must PASS, the bugs such loops ship must still FAIL where they
first show, and what the check cannot judge (dropout, an undeclared clip)
must say so and what to do. The cases are tests/fixtures/real_loop_cases.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from trainparity import NoiseComparison, Outcome
from trainparity._internal.accumulation.step_facts import read_with_step_facts
from trainparity._internal.accumulation.step_probes import ClipRecorder, RandomDraws
from trainparity._internal.accumulation.verdict import Decision
from trainparity._internal.comparison.policies import Difference
from trainparity.api import (
    AccumulationExecutionPlan,
    ExactComparison,
    ToleranceComparison,
    check_accumulation,
)

from tests.fixtures import real_loop_cases
from tests.fixtures.real_loop_cases import CLIP

REPO_ROOT = Path(__file__).resolve().parents[1]
NOISE = NoiseComparison(baselines=2)  # two full-batch baselines and the split reference
CLIPPED = AccumulationExecutionPlan(2, clip_grad_norm=CLIP)


def check(case: str, plan=CLIPPED, comparison=NOISE, tmp_path: Path | None = None):
    return check_accumulation(
        f"tests.fixtures.real_loop_cases:{case}",
        candidate=plan,
        comparison=comparison,
        cwd=REPO_ROOT,
        temporary_root=tmp_path,
    )


def test_a_correct_adamw_loop_passes_the_noise_envelope_of_a_split(tmp_path):
    """The split reference's rounding is the envelope: no hand-tuned atol.

    Under ToleranceComparison(rtol=1e-5, atol=1e-6) this loop FAILs at
    parameter_update (the key bias, whose gradient is rounding alone, moves
    by up to 5× its value); under NoiseComparison the full-batch baselines
    agreed bit for bit, so every split difference FAILed before.
    """
    result = check("AdamWClipLoop", tmp_path=tmp_path)
    assert result.outcome is Outcome.PASS, result.message
    assert result.noise_envelope["samples"] == ["baseline_a", "baseline_b", "split_reference"]
    assert len(set(result.process_ids)) == 4


def test_a_loop_reporting_loss_values_alone_passes_on_its_effective_loss(tmp_path):
    """loss() declares numerator and denominator; the step returns values only. Its totals
    are not a difference (they used to FAIL at loss_accounting.denominator), and the loop
    sums each microbatch's mean over 2 where the split reference sums over 6 samples."""
    result = check("ValueOnlyLoop", tmp_path=tmp_path)
    assert result.outcome is Outcome.PASS, result.message
    assert result.loss_normalization_captured is False


def test_a_tight_tolerance_fail_after_agreeing_gradients_points_at_the_noise_envelope(
    tmp_path,
):
    result = check(
        "AdamWClipLoop",
        comparison=ToleranceComparison(rtol=1e-5, atol=1e-6),
        tmp_path=tmp_path,
    )
    assert result.outcome is Outcome.FAIL
    assert result.first_observed_phase == "parameter_update"
    assert "judge with NoiseComparison()" in result.message


@pytest.mark.parametrize(
    ("case", "phase", "path", "words"),
    [
        pytest.param(
            "UndividedLossLoop",
            "loss_accounting",
            "loss_accounting.effective_loss",
            "first observed divergence in loss_accounting",
            id="loss-not-divided",
        ),
        pytest.param(
            "SilentUndividedLossLoop",  # clipping and AdamW cancel the factor in the update
            "gradient",
            "clipping.total_norm",
            "the gradients train_step clipped had norm",
            id="loss-not-divided-returning-none",
        ),
        pytest.param(
            "ClipPerMicrobatchLoop",
            "gradient",
            "clipping.calls",
            "train_step clipped the gradients 2 times before optimizer.step",
            id="clip-per-microbatch",
        ),
        pytest.param(
            "ZeroGradInLoop",  # only the last microbatch's gradient is left to clip
            "gradient",
            "clipping.total_norm",
            "the gradients train_step clipped had norm",
            id="zero-grad-in-the-loop",
        ),
    ],
)
def test_planted_faults_still_fail_inside_the_envelope_where_they_first_show(
    tmp_path, case, phase, path, words
):
    result = check(case, tmp_path=tmp_path)
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_observed_phase == phase
    assert result.primary_difference.path == path
    assert words in result.message


def test_a_split_reference_whose_losses_do_not_add_up_is_not_taken_as_noise(tmp_path):
    """loss() declares a mean as numerator: two microbatches' numerators add to twice the
    full batch's, so the split reference cannot be trusted to differ by rounding alone."""
    result = check("MeanAccountingLoop", tmp_path=tmp_path)
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert result.message.startswith("split_reference's loss_accounting differs")
    assert result.primary_difference.path == "loss_accounting.denominator"  # 1 vs 2


def test_dropout_in_training_mode_abstains_and_says_what_to_do(tmp_path):
    result = check("DropoutLoop", comparison=ExactComparison(), tmp_path=tmp_path)
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert "dropout in training mode at dropout" in result.message
    assert "cannot hold bit for bit" in result.message
    assert "p=0" in result.message


def test_an_undeclared_clip_abstains_naming_the_declaration(tmp_path):
    result = check(
        "AdamWClipLoop",
        plan=AccumulationExecutionPlan(2),
        comparison=ExactComparison(),
        tmp_path=tmp_path,
    )
    assert result.outcome is Outcome.ABSTAIN, result.message
    assert f"declare AccumulationExecutionPlan(2, clip_grad_norm={CLIP!r})" in result.message


# In-process: the probes and the reading of a verdict ------------------------------------


def test_the_clip_recorder_sees_a_name_imported_from_torch_and_puts_it_back():
    model = torch.nn.Linear(3, 1)
    model(torch.ones(2, 3)).sum().backward()
    imported = real_loop_cases.clip_grad_norm_
    with ClipRecorder() as recorder:
        real_loop_cases.clip_grad_norm_(model.parameters(), 0.25)
        torch.nn.utils.clip_grad_value_(model.parameters(), clip_value=0.1)
    assert real_loop_cases.clip_grad_norm_ is imported
    assert [call["function"] for call in recorder.calls] == ["clip_grad_norm_", "clip_grad_value_"]
    record = recorder.record()
    assert record["calls"] == 2 and record["clip_value"] == 0.1
    assert recorder.calls[0]["max_norm"] == 0.25 and recorder.calls[0]["total_norm"] > 0.25


def test_random_draws_notice_dropout_and_nothing_else():
    draws = RandomDraws()
    draws.start()
    torch.nn.functional.dropout(torch.ones(4), 0.5, training=False)
    assert draws.drew() is False
    torch.nn.functional.dropout(torch.ones(4), 0.5, training=True)
    assert draws.drew() is True


def _fail(path: str, phase: str = "gradient", reason: str = "tensor_value") -> Decision:
    difference = Difference(path, reason, "a", "b")
    return Decision(
        Outcome.FAIL,
        f"first observed divergence in {phase}; not a root-cause claim",
        first_observed_phase=phase,
        primary_difference=difference,
        all_differences=(difference,),
        verified_equal_initial_state=True,
    )


def _read(decision: Decision, **facts) -> Decision:
    options = {
        "random_modules": (),
        "drew": False,
        "noise_measured": False,
        "declared_clip": 1.0,
        "microbatch_count": 2,
        "candidate_clipping": None,
        "reference_clipping": None,
        "own_step": True,
    }
    return read_with_step_facts(decision, **{**options, **facts})


def test_random_draws_turn_a_fail_and_a_noisy_pass_into_abstain_but_leave_a_bitwise_pass():
    assert _read(_fail("gradient.w"), drew=True).outcome is Outcome.ABSTAIN
    passed = Decision(Outcome.PASS, "declared executions are equivalent")
    assert _read(passed, drew=True, noise_measured=True).outcome is Outcome.ABSTAIN
    assert _read(passed, drew=True).outcome is Outcome.PASS


def test_a_declared_clip_the_loop_did_not_make_is_a_fail_saying_so():
    read = _read(
        _fail("clipping", reason="missing_candidate"),
        reference_clipping={"calls": 1, "max_norm": 1.0},
    )
    assert read.outcome is Outcome.FAIL
    assert "train_step did not clip before optimizer.step" in read.message


def test_value_clipping_that_cannot_be_declared_abstains():
    read = _read(
        _fail("clipping", reason="missing_baseline"),
        declared_clip=None,
        candidate_clipping={"calls": 1, "function": "clip_grad_value_", "clip_value": 0.1},
    )
    assert read.outcome is Outcome.ABSTAIN
    assert "clips by norm only" in read.message


def test_a_step_count_fail_gets_no_tolerance_hint():
    decision = _fail("optimizer.step_calls", phase="optimizer_state", reason="value")
    assert _read(decision, tolerance=True).message == decision.message
