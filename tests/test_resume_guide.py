"""The resume guide's example project runs as documented: PASS for the clean case, FAIL for the bug."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "docs" / "examples" / "resume_project"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    target = tmp_path_factory.mktemp("guide") / "project"
    shutil.copytree(EXAMPLE, target)
    return target


def _run(project: Path, case: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "run_parity.py", case],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_clean_example_passes_and_keeps_its_logs(project):
    completed = _run(project, "ResumeCase")
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert completed.stdout.startswith("PASS final states are exactly equivalent at step 4")
    report = json.loads((project / "trainparity-report-ResumeCase.json").read_text())
    assert report["outcome"] == "PASS" and report["schema_version"] == 2
    assert (
        project / ".trainparity-runs" / "ResumeCase" / "candidate_resume" / "stderr.log"
    ).exists()


def test_forgotten_scheduler_fails_at_the_round_trip_in_the_scheduler(project):
    completed = _run(project, "ForgetfulResumeCase")
    assert completed.returncode == 1
    # train.py records right after loading: the fresh scheduler shows before any training.
    assert "FAIL first observed divergence at step 2: scheduler._last_lr[0]" in completed.stdout
    assert "scheduler.last_epoch: value (2 vs 0)" in completed.stdout
    report = json.loads((project / "trainparity-report-ForgetfulResumeCase.json").read_text())
    assert report["trajectory"]["first_divergence"]["round_trip"] is True
    final = [difference["path"] for difference in report["final_state_differences"]]
    assert final[0] == "scheduler._step_count"


def test_guide_names_the_phases_and_the_outcomes():
    guide = (REPO / "docs" / "resume.md").read_text(encoding="utf-8")
    for word in (
        "baseline_a",
        "baseline_b",
        "candidate_split",
        "candidate_resume",
        "ABSTAIN",
        "stderr.log",
    ):
        assert word in guide
