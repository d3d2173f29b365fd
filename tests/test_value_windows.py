"""Value previews centre on a tensor's first differing element, not on its first (equal) elements."""

from __future__ import annotations

import dataclasses

import torch
import trainparity
from trainparity._internal.comparison.policies import ExactComparison, ToleranceComparison
from trainparity._internal.comparison.windows import differences_with_windows
from trainparity._internal.recording.diff import diff_recordings
from trainparity._internal.reports.text_views import text_report
from trainparity.api import recording_to

SIZE = 1 << 20


def _pair(index: int, size: int = SIZE) -> tuple[dict, dict]:
    baseline = torch.arange(size, dtype=torch.float32)
    candidate = baseline.clone()
    candidate[index] += 0.5
    return {"model": {"weight": baseline}}, {"model": {"weight": candidate}}


def test_the_window_holds_the_elements_around_the_first_difference():
    differences, windows = differences_with_windows(ExactComparison(), *_pair(654_321))
    assert [difference.path for difference in differences] == ["model.weight"]
    (window,) = windows
    assert (window.path, window.index, window.start) == ("model.weight", 654_321, 654_319)
    assert window.baseline == (654_319.0, 654_320.0, 654_321.0, 654_322.0, 654_323.0)
    assert window.candidate == (654_319.0, 654_320.0, 654_321.5, 654_322.0, 654_323.0)
    # The contract's summary still shows the first four values: equal on both sides.
    assert differences[0].baseline == differences[0].candidate


def test_windows_stay_inside_the_tensor_and_follow_the_policy():
    assert differences_with_windows(ExactComparison(), *_pair(0))[1][0].start == 0
    assert differences_with_windows(ExactComparison(), *_pair(SIZE - 1))[1][0].start == SIZE - 5
    short = differences_with_windows(ExactComparison(), *_pair(1, size=3))[1][0]
    assert (short.start, len(short.baseline)) == (0, 3)
    # Within tolerance there is no difference, so no window.
    loose = ToleranceComparison(rtol=0.0, atol=1.0)
    assert differences_with_windows(loose, *_pair(7)) == ((), ())


def test_the_report_previews_the_window_with_its_index():
    differences, windows = differences_with_windows(ExactComparison(), *_pair(654_321))
    report = {
        "outcome": "FAIL",
        "message": "first observed divergence at step 4: model.weight",
        "primary_difference": dataclasses.asdict(differences[0]),
        "all_differences": [dataclasses.asdict(differences[0])],
        "value_windows": [dataclasses.asdict(windows[0])],
    }
    lines = [" ".join(line.split()) for line in text_report(report).splitlines()]
    assert "first differing element flat index 654321 (row-major)" in lines
    assert "baseline [654319..654323] 654319.0, 654320.0, [654321.0], 654322.0, 654323.0" in lines
    assert "candidate [654319..654323] 654319.0, 654320.0, [654321.5], 654322.0, 654323.0" in lines


def test_a_recording_diff_reports_the_window_of_its_first_divergent_step(tmp_path):
    for name, (state, _) in (("a", _pair(9, size=64)), ("b", _pair(9, size=64)[::-1])):
        with recording_to(tmp_path / name, mode="full"):
            trainparity.record(1, state)
    diff = diff_recordings(tmp_path / "a", tmp_path / "b")
    (window,) = diff.value_windows
    assert (window.path, window.index, window.candidate[2]) == ("model.weight", 9, 9.5)
    assert diff.to_dict()["value_windows"][0]["index"] == 9
