"""check_resume on real Lightning: a clean resume, and a callback whose state is not restored."""

from __future__ import annotations

import pytest

pytest.importorskip("lightning")

from trainparity import Outcome, check_resume

from tests.integrations.conftest import CHILD_ENVIRONMENT  # noqa: E402

pytestmark = pytest.mark.warm_preload("lightning")


def _resume(project, case, tmp_path):
    return check_resume(
        f"lightning_cases:{case}",
        cwd=project,
        environment=CHILD_ENVIRONMENT,
        temporary_root=tmp_path,
    )


def test_clean_lightning_resume_passes(project, tmp_path):
    result = _resume(project, "LightningResume", tmp_path)
    assert result.outcome == Outcome.PASS, result.message


def test_callback_state_that_is_not_restored_fails_at_that_callback(project, tmp_path):
    result = _resume(project, "LightningForgettingCallbackState", tmp_path)
    assert result.outcome == Outcome.FAIL, result.message
    assert result.primary_difference.path == "callbacks.SamplesSeen.count"
    assert (result.primary_difference.baseline, result.primary_difference.candidate) == ("48", "32")
    assert len(result.all_differences) == 1
