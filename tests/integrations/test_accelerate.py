"""check_resume on a real Accelerate loop on two gloo ranks (torchrun, CPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("accelerate")

from trainparity import Outcome, check_resume

from tests.integrations.conftest import CHILD_ENVIRONMENT  # noqa: E402


def _resume(project, case, tmp_path):
    return check_resume(
        f"accelerate_cases:{case}",
        cwd=project,
        environment=CHILD_ENVIRONMENT,
        temporary_root=tmp_path,
    )


def test_clean_two_rank_accelerate_resume_passes(project, tmp_path):
    result = _resume(project, "AccelerateResume", tmp_path)
    assert result.outcome == Outcome.PASS, result.message


def test_random_states_not_restored_fail_on_every_rank(project, tmp_path):
    result = _resume(project, "AccelerateReseedingAfterLoad", tmp_path)
    assert result.outcome == Outcome.FAIL, result.message
    paths = {difference.path for difference in result.all_differences}
    for rank in ("0", "1"):
        assert f'random_states["{rank}"].torch_manual_seed' in paths


def test_a_loader_drawing_from_the_global_rng_fails_after_skip_first_batches(project, tmp_path):
    result = _resume(project, "AccelerateLoaderDrawingGlobalRNG", tmp_path)
    assert result.outcome == Outcome.FAIL, result.message
    assert result.primary_difference.path.startswith("model[")
    paths = {difference.path for difference in result.all_differences}
    # One extra draw per rank: numpy's and Python's generators still agree.
    assert {p for p in paths if p.startswith("random_states")} == {
        'random_states["0"].torch_manual_seed',
        'random_states["1"].torch_manual_seed',
    }
