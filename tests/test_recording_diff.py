"""diff_recordings and `trainparity diff` on recordings of real training that really rounds differently."""

from __future__ import annotations

import json

import pytest
import torch
from trainparity import Outcome, ToleranceComparison
from trainparity._internal.cli.main import main
from trainparity._internal.reports.html import write_html_report
from trainparity.api import diff_recordings
from trainparity.quickstarts.trajectory import STEPS, train

from tests.chromium import chromium_binary, png_pixels, render_page


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    train(root / "one", threads=1)
    train(root / "one-again", threads=1)
    train(root / "two", threads=2)
    train(root / "double", threads=1, dtype=torch.float64)
    return root


def growing(diff) -> list[float]:
    errors = [point["max_relative_rms_error"] for point in diff.drift]
    start = diff.compared_steps.index(diff.first_divergent_step)
    assert errors[start] > 0 and errors[-1] > 2 * errors[start]
    assert all(error == 0 for error in errors[:start])
    return errors


def test_thread_counts_part_at_a_step_and_drift_apart(runs):
    diff = diff_recordings(runs / "one", runs / "two")
    assert diff.outcome is Outcome.FAIL
    assert diff.first_divergent_step is not None
    assert diff.message.startswith(f"the runs part at step {diff.first_divergent_step}: ")
    assert diff.compared_steps == tuple(range(1, STEPS + 1))
    growing(diff)
    assert all(set(point["components"]) == {"embedding", "model"} for point in diff.drift)
    keys = {lead.key for lead in diff.environment_leads}
    assert "threads.torch_intra_op" in keys


def test_float32_against_float64_drifts_from_the_first_step(runs):
    diff = diff_recordings(runs / "double", runs / "one")
    assert diff.first_divergent_step == 1
    assert diff.primary_difference.reason == "tensor_dtype"
    growing(diff)


def test_identical_runs_do_not_part(runs):
    diff = diff_recordings(runs / "one", runs / "one-again")
    assert diff.outcome is Outcome.PASS
    assert diff.first_divergent_step is None and diff.first_step_beyond_tolerance is None
    assert all(point["max_relative_rms_error"] == 0 for point in diff.drift)


def test_a_tolerance_moves_the_step_beyond_it(runs):
    diff = diff_recordings(
        runs / "one", runs / "two", comparison=ToleranceComparison(rtol=1e-3, atol=1e-6)
    )
    assert diff.first_divergent_step is not None
    assert diff.first_step_beyond_tolerance is None
    assert diff.outcome is Outcome.PASS


def test_cli_prints_the_drift_table_and_writes_the_svg_report(runs, tmp_path, capsys):
    report = tmp_path / "drift.html"
    code = main(["diff", str(runs / "one"), str(runs / "two"), "--report", str(report)])
    assert code == 1  # FAIL
    output = capsys.readouterr().out
    assert "Drift (relative RMS error; * first divergent step)" in output
    page = report.read_text()
    assert "<svg" in page and "first-divergent-step" in page and "<script" not in page
    assert main(["diff", str(runs / "one"), str(runs / "one-again"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["first_divergent_step"] is None


def test_notebook_view_carries_the_curve(runs):
    assert "<svg" in diff_recordings(runs / "one", runs / "two")._repr_html_()


def test_chromium_draws_the_drift_curve(runs, tmp_path):
    chromium = chromium_binary()
    page = tmp_path / "drift.html"
    write_html_report(page, diff_recordings(runs / "one", runs / "two"))
    screenshot = tmp_path / "drift.png"
    render_page(
        chromium, page, tmp_path / "profile", "--window-size=800,600", f"--screenshot={screenshot}"
    )
    blue = (0x09, 0x69, 0xDA)  # the first component's line
    drawn = sum(
        1
        for pixel in png_pixels(screenshot.read_bytes())
        if all(abs(a - b) <= 24 for a, b in zip(pixel, blue, strict=True))
    )
    assert drawn > 200, "the plot area should show the drift curve"
