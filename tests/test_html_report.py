"""HTML reports: self-contained pages, and a FAIL report rendered by headless Chromium."""

from __future__ import annotations

import re

import pytest
from trainparity import Outcome
from trainparity._internal.environment import environment_fingerprint
from trainparity._internal.processes.check_result import ExternalProcessEvidence
from trainparity._internal.reports.html import render_html_report, write_html_report
from trainparity._internal.reports.html_views import OUTCOME_COLOURS
from trainparity.api import Difference, ProcessResumeResult

from tests.chromium import chromium_binary, pixels_near, render_page

FIRST_PATH = 'optimizer.state["0"].exp_avg'


def _failed_resume() -> ProcessResumeResult:
    first = Difference(
        FIRST_PATH,
        "tensor_value",
        "tensor(shape=(3,), dtype=torch.float32, device=cpu, values=[0.1, 0.2, 0.3])",
        "tensor(shape=(3,), dtype=torch.float32, device=cpu, values=[0.1, 0.2, 0.4])",
        0.1,
        0.33,
    )
    return ProcessResumeResult(
        outcome=Outcome.FAIL,
        message=f"first observed divergence at step 4: {FIRST_PATH}",
        case="cases:Faulty",
        first_divergent_step=4,
        primary_difference=first,
        all_differences=(first,),
        processes=(ExternalProcessEvidence("baseline_a", 11, 1.5, 0),),
        timing_seconds={"total_wall": 6.0},
        environment=environment_fingerprint(),
    )


def test_the_page_is_self_contained_and_escapes_every_value():
    page = render_html_report(_failed_resume())
    assert page.startswith("<!DOCTYPE html>")
    assert not re.search(r"<script|<link|<img|src=|https?://", page, flags=re.IGNORECASE)
    assert "optimizer.state[&quot;0&quot;].exp_avg" in page
    assert "Full report (JSON)" in page and "&quot;environment&quot;" in page


def test_a_file_name_that_is_not_utf8_is_written_escaped(tmp_path):
    # os.fsdecode(b"\xff.safetensors"): what argv and os.listdir give for such a name
    report = {"schema_version": 2, "outcome": "PASS", "message": "ok", "baseline": "\udcff.st"}
    size = write_html_report(tmp_path / "page.html", report)
    data = (tmp_path / "page.html").read_bytes()
    assert len(data) == size
    assert "<td>\\udcff.st</td>" in data.decode("utf-8")


def test_report_dicts_and_the_environment_report_render_too():
    report = {"schema_version": 2, "environment": environment_fingerprint()}
    page = render_html_report(report)
    assert "<h3>Environment</h3>" in page and "torch.version" in page
    with pytest.raises(TypeError, match="to_dict"):
        render_html_report(object())


def test_chromium_shows_the_outcome_and_first_divergence_of_a_fail_report(tmp_path):
    chromium = chromium_binary()
    page = tmp_path / "report.html"
    write_html_report(page, _failed_resume())

    dom = render_page(chromium, page, tmp_path / "profile", "--dump-dom").stdout
    badge = re.search(r"<span class=\"tp-badge\" id=\"tp-outcome\"[^>]*>([^<]*)</span>", dom)
    assert badge is not None and badge.group(1) == "FAIL"
    divergence = dom.split("<h3>First divergence</h3>", 1)[1]
    assert 'optimizer.state["0"].exp_avg' in divergence.split("</table>", 1)[0]

    screenshot = tmp_path / "report.png"
    render_page(
        chromium,
        page,
        tmp_path / "profile",
        "--window-size=800,240",
        f"--screenshot={screenshot}",
    )
    badge_pixels = pixels_near(screenshot.read_bytes(), OUTCOME_COLOURS["FAIL"])
    assert badge_pixels > 300, "the red FAIL badge should be visible above the fold"
