"""A check whose runs record reports the drift of the pair that parts: how fast the gap grows."""

from __future__ import annotations

import torch
import trainparity
from trainparity._internal.comparison.policies import ExactComparison
from trainparity._internal.recording.phase_recordings import RECORDINGS_DIRECTORY
from trainparity._internal.runs.recordings import RunsTrajectories
from trainparity.api import recording_to


def _record(root, run: str, offsets: dict[int, float]) -> None:
    with recording_to(root / RECORDINGS_DIRECTORY / run, mode="full"):
        for step in range(1, 5):
            weight = torch.ones(8) + offsets.get(step, 0.0)
            trainparity.record(step, {"model": {"weight": weight}, "step": step})


def test_the_drift_of_two_runs_starts_at_their_first_divergent_step(tmp_path):
    _record(tmp_path, "reference_a", {})
    _record(tmp_path, "other_a", {3: 0.5, 4: 1.0})
    trajectories = RunsTrajectories(tmp_path, ExactComparison())
    divergence = trajectories.part("reference_a", "other_a")
    assert divergence is not None and divergence.step == 3
    trajectory = trajectories.report_fields(())["trajectory"]
    drift = {point["step"]: point["components"]["model"] for point in trajectory["drift"]}
    assert drift == {1: 0.0, 2: 0.0, 3: 0.5, 4: 1.0}  # ‖a−b‖₂/‖a‖₂ of ones against ones + c


def test_runs_that_agree_report_no_drift(tmp_path):
    _record(tmp_path, "reference_a", {})
    _record(tmp_path, "other_a", {})
    trajectories = RunsTrajectories(tmp_path, ExactComparison())
    assert trajectories.part("reference_a", "other_a") is None
    assert "drift" not in trajectories.report_fields(())["trajectory"]
