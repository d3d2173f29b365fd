"""The resume guide's example project runs as documented: PASS for the clean case, FAIL for the bug.

Each case runs once (module fixtures); the FAIL's report is also rendered in
headless Chromium, whose page must lead with the plain-words diagnosis.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from trainparity._internal.reports.html import write_html_report

from tests.chromium import chromium_binary, pixels_near, render_page
from tests.doc_blocks import REPO, code_blocks

EXAMPLE = REPO / "docs" / "examples" / "resume_project"
GUIDE = REPO / "docs" / "resume.md"
DIAGNOSIS_BACKGROUND = "#fff8c5"  # reports/html_views.py's .tp-diagnosis


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("guide") / "project"
    shutil.copytree(EXAMPLE, target)
    return target


def _run(project: Path, case: str) -> tuple[subprocess.CompletedProcess, dict]:
    completed = subprocess.run(
        [sys.executable, "run_parity.py", case],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report_file = project / f"trainparity-report-{case}.json"
    report = json.loads(report_file.read_text()) if report_file.exists() else {}
    return completed, report


@pytest.fixture(scope="module")
def forgetful(project) -> tuple[subprocess.CompletedProcess, dict]:
    return _run(project, "ForgetfulResumeCase")


def test_clean_example_passes_and_keeps_its_logs(project):
    completed, report = _run(project, "ResumeCase")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.startswith("PASS final states are exactly equivalent at step 8")
    assert report["outcome"] == "PASS" and report["schema_version"] == 2
    assert (
        project / ".trainparity-runs" / "ResumeCase" / "candidate_resume" / "stderr.log"
    ).exists()
    # Every phase recorded from where it started: step 0, or the split step right after loading.
    assert report["trajectory"]["recorded_steps"] == {
        "baseline_a": list(range(9)),
        "baseline_b": list(range(9)),
        "candidate_split": list(range(5)),
        "candidate_resume": list(range(4, 9)),
    }


def test_forgotten_scheduler_fails_at_the_round_trip_in_the_scheduler(forgetful):
    completed, report = forgetful
    assert completed.returncode == 1, completed.stdout + completed.stderr
    # train.py records right after loading: the fresh scheduler shows before any training.
    assert "FAIL first observed divergence at step 4: scheduler._last_lr[0]" in completed.stdout
    assert "scheduler.last_epoch: value (4 vs 0)" in completed.stdout
    assert report["trajectory"]["first_divergence"]["round_trip"] is True
    final = [difference["path"] for difference in report["final_state_differences"]]
    assert final[0] == 'model["0.bias"]'  # the downstream effect, as the guide says
    drift = {point["step"]: point["components"] for point in report["trajectory"]["drift"]}
    assert sorted(drift) == [4, 5, 6, 7, 8]
    assert drift[4]["model"] == drift[5]["model"] == 0.0 < drift[6]["model"] < drift[8]["model"]


def test_chromium_shows_the_diagnosis_first_and_the_drift_below_it(forgetful, tmp_path):
    chromium = chromium_binary()
    page = tmp_path / "report.html"
    write_html_report(page, forgetful[1])

    dom = render_page(chromium, page, tmp_path / "profile", "--dump-dom").stdout
    first_section = re.search(r"<section class=\"([^\"]+)\">(.*?)</section>", dom, re.DOTALL)
    assert first_section is not None and first_section.group(1) == "tp-diagnosis"
    diagnosis = re.sub(r"<[^>]+>", " ", first_section.group(2))
    diagnosis = " ".join(diagnosis.split())
    for said in (
        "baseline = baseline_a (the uninterrupted run); "
        "candidate = candidate_resume (the resumed run)",
        "right after loading, scheduler differs from the uninterrupted run at step 4: "
        "the resume does not restore it",
        "differing at step 4 scheduler._last_lr[0], scheduler._step_count, scheduler.last_epoch",
        "then model tensors differ from step 6 on",
        "try next save scheduler in the checkpoint and load it back",
    ):
        assert said in diagnosis, diagnosis
    after = dom[first_section.end() :]
    assert after.index('class="trainparity-drift"') < after.index("<h3>Summary</h3>")
    assert dom.index("<h3>Diagnosis</h3>") < dom.index("<h3>Timings</h3>")

    screenshot = tmp_path / "report.png"
    render_page(
        chromium,
        page,
        tmp_path / "profile",
        "--window-size=1000,400",
        f"--screenshot={screenshot}",
    )
    # The diagnosis block's background fills a band above the fold.
    assert pixels_near(screenshot.read_bytes(), DIAGNOSIS_BACKGROUND, tolerance=3) > 50_000


def test_the_guide_shows_the_project_as_it_is_and_names_what_a_newcomer_needs():
    blocks = code_blocks(GUIDE)
    shown = {block.source.name for block in blocks if block.kind == "file"}
    assert shown == {"train.py", "parity_case.py", "run_parity.py"}
    # The project comes first: the page starts with it, before any explanation block.
    assert blocks[0].kind == "file"
    guide = GUIDE.read_text(encoding="utf-8")
    for word in (
        "baseline_a",
        "baseline_b",
        "candidate_split",
        "candidate_resume",
        "ABSTAIN",
        "stderr.log",
        "`resume_from`",
        "`run_dir`",
        "`end_step`",
        "`cwd`",
        "`phase`",
        "sys.path",
        "comparison=",
        'model["0.bias"]',
        "final_state_differences",
        "mid-epoch",
    ):
        assert word in guide, word
