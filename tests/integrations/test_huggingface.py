"""check_resume and check_runs on the real Hugging Face Trainer (transformers 5.x), tiny GPT-2."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from trainparity import Outcome, ToleranceComparison, check_resume, check_runs
from trainparity.api import diff_snapshots  # noqa: E402

from tests.integrations.conftest import CHILD_ENVIRONMENT  # noqa: E402

pytestmark = pytest.mark.warm_preload("transformers.trainer")

# HF's gradient accumulation (4 x 2 vs 1 x 8) agrees within float rounding, not bitwise.
ACCUMULATION_TOLERANCE = ToleranceComparison(rtol=1e-4, atol=1e-5)


def _resume(project, case, tmp_path):
    return check_resume(
        f"hf_cases:{case}", cwd=project, environment=CHILD_ENVIRONMENT, temporary_root=tmp_path
    )


def test_clean_trainer_resume_passes(project, tmp_path):
    result = _resume(project, "TrainerResume", tmp_path)
    assert result.outcome == Outcome.PASS, result.message
    assert list(tmp_path.iterdir()) == []


def test_ignore_data_skip_fails_at_the_first_step_after_the_split(project, tmp_path):
    result = _resume(project, "TrainerIgnoringDataSkip", tmp_path)
    assert result.outcome == Outcome.FAIL, result.message
    # The callback records every step and the IDs of every batch: the resumed run replays
    # the epoch's first batches, so step 5, the first after the split at 4, trains on samples
    # already seen, and the report names them first.
    assert result.first_divergent_step == 5
    repeated = result.primary_difference
    assert (repeated.path, repeated.reason) == ("coverage.epoch0.rank0", "sample_repeated")
    # 4 steps of 4 samples before the split: position 16 is the resumed run's first sample.
    assert "consumed again at position 16 of epoch 0 on rank 0" in repeated.candidate
    assert "(candidate_resume's position 0 during step 5); first consumed at position 0" in (
        repeated.candidate
    )
    assert any(d.path.startswith("model[") for d in result.all_differences)
    # The final-state view: sample order first, then log_history (before the model); entry 4
    # is step 5.
    assert result.final_state_differences[0] == repeated
    assert result.final_state_differences[1].path == "log_history[4].epoch"
    paths = {difference.path for difference in result.final_state_differences}
    assert "log_history[4].loss" in paths
    assert not any(path.startswith("log_history[3]") for path in paths)
    assert any(path.startswith("model[") for path in paths)


def test_save_only_model_checkpoints_resume_with_a_fresh_optimizer_and_schedule(project, tmp_path):
    result = _resume(project, "TrainerSavingOnlyTheModel", tmp_path)
    assert result.outcome == Outcome.FAIL, result.message
    # The round trip at the split step: the resumed run starts with a fresh optimizer
    # and schedule (the learning rate restarted from its warm-up).
    assert result.first_divergent_step == 4
    assert result.primary_difference.path == "optimizer.param_groups[0].lr"
    assert result.final_state_differences[0].path == "log_history[4].grad_norm"
    paths = {difference.path for difference in result.final_state_differences}
    assert "log_history[4].learning_rate" in paths
    assert any(path.startswith("model[") for path in paths)
    # Every phase saved the model only: no optimizer, scheduler or RNG file to compare.
    assert not any(path.startswith(("optimizer", "scheduler", "rng")) for path in paths)


def test_accumulation_4x2_and_1x8_differ_only_by_rounding(project, tmp_path):
    result = check_runs(
        "hf_cases:TrainerAccumulation",
        cwd=project,
        environment=CHILD_ENVIRONMENT,
        work_dir=tmp_path,
    )
    assert result.outcome == Outcome.FAIL, result.message
    assert result.divergent_variant == "accum1x8"
    # The callback records every step: the runs part at step 1, in the optimizer state.
    assert result.first_divergent_step == 1
    assert result.primary_difference.path == 'optimizer.state["0"].exp_avg'
    tensor_errors = [d.max_abs_error for d in result.all_differences if d.max_abs_error is not None]
    assert tensor_errors and max(tensor_errors) < 1e-5
    assert result.final_state_differences[0].path == "log_history[0].loss"
    # The same two recorded runs agree under a tolerance (the snapshot files stay in work_dir).
    snapshots = tmp_path / "snapshots"
    tolerant = diff_snapshots(
        snapshots / "accum4x2_a.safetensors",
        snapshots / "accum1x8_a.safetensors",
        comparison=ACCUMULATION_TOLERANCE,
    )
    assert tolerant.outcome == Outcome.PASS, tolerant.message


def test_a_loss_that_ignores_num_items_in_batch_breaks_accumulation(project, tmp_path):
    own_loss = ["--own-loss"]
    result = check_runs(
        "hf_cases:TrainerAccumulation",
        {
            "own_loss_accum1x8": {"args": ["--accum", "1", "--batch", "8", *own_loss]},
            "own_loss_accum4x2": {"args": ["--accum", "4", "--batch", "2", *own_loss]},
        },
        comparison=ACCUMULATION_TOLERANCE,
        cwd=project,
        environment=CHILD_ENVIRONMENT,
        temporary_root=tmp_path,
    )
    assert result.outcome == Outcome.FAIL, result.message
    assert result.first_divergent_step == 1
    assert result.primary_difference.path == 'optimizer.state["0"].exp_avg'
    # No division by the 4 accumulation steps: the first gradient is about 4 times as large.
    grad_norm = next(
        d for d in result.final_state_differences if d.path == "log_history[0].grad_norm"
    )
    ratio = float(grad_norm.candidate) / float(grad_norm.baseline)
    assert 3.0 < ratio < 5.0
