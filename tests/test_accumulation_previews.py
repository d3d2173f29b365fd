"""Accumulation reports preview the elements that differ, as resume reports do.

Issue 53, finding 7: a Difference's summary shows a tensor's first four
elements; WideGradientCase's gradient is zero there on both sides, so the
accumulation report showed four equal zeros. Its result now holds the
window around the first differing element (comparison/windows.py), which the
report's "First divergence" shows.
"""

from __future__ import annotations

from pathlib import Path

from trainparity import AccumulationExecutionPlan, Outcome, check_accumulation
from trainparity._internal.reports.text_views import text_report

REPOSITORY = Path(__file__).resolve().parent.parent


def test_an_accumulation_fail_previews_the_first_differing_elements(tmp_path):
    result = check_accumulation(
        "tests.fixtures.wide_gradient_cases:WideGradientCase",
        # Clipping each microbatch's gradient, not their sum once: the gradient differs.
        candidate=AccumulationExecutionPlan(2, clip_grad_norm=1.0, clip_per_microbatch=True),
        cwd=REPOSITORY,
        temporary_root=tmp_path,
        start="warm",
        environment={"PYTHONHASHSEED": "0"},  # one warm server for the three children
        timeout=240,
    )
    assert result.outcome is Outcome.FAIL, result.message
    assert result.primary_difference.path == "gradient.weight"
    assert result.primary_difference.baseline.endswith("values=[0.0, 0.0, 0.0, 0.0])")
    (window,) = result.value_windows
    assert (window.path, window.index, window.start) == ("gradient.weight", 4, 2)
    assert window.baseline[:2] == window.candidate[:2] == (0.0, 0.0)
    assert window.baseline[2] != window.candidate[2]
    report = result.to_dict()
    lines = [" ".join(line.split()) for line in text_report(report).splitlines()]
    assert "first differing element flat index 4 (row-major)" in lines
    assert f"baseline [2..6] 0.0, 0.0, [{window.baseline[2]!r}]" in " ".join(lines)
