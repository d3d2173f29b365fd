"""Chained resumes: check_resume(split_steps=(2, 4)) runs split → resume → resume, each in a fresh process.

tests/fixtures/chain_job.py keeps two counters per process instead of per
run: both are right after the first resume and wrong after the second, so
only a chain catches them, at the step where they show.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trainparity
from trainparity import Outcome

REPO_ROOT = Path(__file__).resolve().parent.parent
CASES = "tests.fixtures.chain_cases"
CHAIN_PHASES = ["candidate_split", "candidate_resume_1", "candidate_resume"]


def _check(tmp_path: Path, case: str, **options):
    report = tmp_path / f"{case}.json"
    result = trainparity.check_resume(
        f"{CASES}:{case}", cwd=REPO_ROOT, temporary_root=tmp_path, report_path=report, **options
    )
    return result, json.loads(report.read_text())


def test_a_clean_chain_passes_and_reports_its_links(tmp_path):
    result, report = _check(tmp_path, "ChainCase")
    assert result.outcome is Outcome.PASS, result.message
    assert report["resume_chain"] == [
        {"phase": "candidate_split", "from_step": 0, "end_step": 2, "world_size": None},
        {"phase": "candidate_resume_1", "from_step": 2, "end_step": 4, "world_size": None},
        {"phase": "candidate_resume", "from_step": 4, "end_step": 6, "world_size": None},
    ]
    phases = [process["phase"] for process in report["processes"]]
    assert phases == ["baseline_a", "baseline_b", *CHAIN_PHASES]
    assert len({process["pid"] for process in report["processes"]}) == 5
    recorded = report["trajectory"]["recorded_steps"]
    assert recorded["candidate_resume_1"] == [2, 3, 4]
    assert recorded["candidate_resume"] == [4, 5, 6]


def test_data_replayed_at_the_second_resume_fails_at_its_step(tmp_path):
    result, _ = _check(tmp_path, "DataPositionCase")
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == 5
    first = result.primary_difference
    assert (first.path, first.reason) == ("coverage.epoch0.rank0", "sample_repeated")
    assert "candidate_resume's position 0 during step 5" in first.candidate


def test_a_counter_reset_at_the_second_resume_fails_where_it_loads(tmp_path):
    result, _ = _check(tmp_path, "SchedulerCounterCase")
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == 4
    assert result.primary_difference.path == "scheduler.last_epoch"
    assert (result.primary_difference.baseline, result.primary_difference.candidate) == ("4", "2")
    assert result.trajectory["first_divergence"]["candidate_phase"] == "candidate_resume"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"split_steps": (4, 2)}, "strictly increasing"),
        ({"split_steps": (2, 6)}, "total_step 6"),
        ({"split_steps": ()}, "at least one step"),
        ({"world_sizes": (2, 1)}, "one rank count >= 1 per candidate phase (3"),
    ],
)
def test_a_malformed_chain_is_a_setup_error(tmp_path, options, named):
    result = trainparity.check_resume(
        f"{CASES}:ChainCase", cwd=REPO_ROOT, temporary_root=tmp_path, **options
    )
    assert result.outcome is Outcome.ERROR
    assert named in result.message, result.message
    assert result.processes == ()
