"""`trainparity resume --plan-only DIR` + `trainparity judge DIR`: phases run by hand, verdict by us.

The plan's shell scripts run as a user (or any scheduler) would run them;
judge then gives the verdict and the report of a check that ran them itself
(report pins' volatile keys aside), and names the phase whose outputs are
missing.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from trainparity import check_resume
from trainparity.cli.main import main

from tests.test_command_case import OPTIONS, TEMPLATE
from tests.test_report_pins import pinned_form

PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run_plan(directory: Path) -> None:
    for phase in PHASES:  # in the plan's order: candidate_resume comes after candidate_split
        subprocess.run(
            ["sh", str(directory / f"{phase}.sh")], env=ONE_THREAD, check=True, timeout=300
        )


def _judge(capsys, directory: Path) -> tuple[int, dict]:
    code = main(["judge", str(directory), "--json"])
    return code, json.loads(capsys.readouterr().out)


def _comparable(report: dict) -> dict:
    """The report without what depends on the machine, the moment, or where the phases ran."""
    form = pinned_form(report)
    for row in form["processes"]:
        row.pop("job_id", None)
    return form


def test_a_faulty_case_planned_run_by_hand_and_judged_fails_as_a_local_check(capsys, tmp_path):
    case = "trainparity.quickstarts.resume:FaultyCase"
    plan = tmp_path / "plan"
    assert main(["resume", case, "--plan-only", str(plan), "--env", "PYTHONHASHSEED=0"]) == 0
    written = json.loads((plan / "plan.json").read_text(encoding="utf-8"))
    assert [phase["name"] for phase in written["phases"]] == list(PHASES)
    assert written["phases"][3]["after"] == ["candidate_split"]
    assert written["environment"] == {"PYTHONHASHSEED": "0"}
    assert "plan written to" in capsys.readouterr().out
    _run_plan(plan)

    code, judged = _judge(capsys, plan)
    local = check_resume(
        case, work_dir=tmp_path / "local", environment={"PYTHONHASHSEED": "0"}
    ).to_dict()
    assert (code, judged["outcome"]) == (1, "FAIL"), judged["message"]
    assert _comparable(judged) == _comparable(json.loads(json.dumps(local)))

    # Partial outputs: the phase that left no result is named.
    (plan / "candidate_resume" / "phase-result.json").unlink()
    code, judged = _judge(capsys, plan)
    assert (code, judged["outcome"]) == (3, "ERROR")
    assert judged["message"].startswith("candidate_resume's job "), judged["message"]
    assert "run candidate_resume.sh" in judged["message"]


def test_a_clean_command_template_planned_and_judged_passes(capsys, tmp_path):
    plan = tmp_path / "plan"
    assert main(["resume", "--plan-only", str(plan), *OPTIONS, "--", *TEMPLATE]) == 0
    capsys.readouterr()
    _run_plan(plan)
    code, judged = _judge(capsys, plan)
    assert (code, judged["outcome"]) == (0, "PASS"), judged["message"]
    assert [row["job_id"] for row in judged["processes"]] == [
        str(plan.resolve() / f"{phase}.sh") for phase in PHASES
    ]


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (["judge", "no-such-directory"], "resume --plan-only DIR"),
        (
            [
                "resume",
                "trainparity.quickstarts.resume:CleanCase",
                "--plan-only",
                "p",
                "--executor",
                "slurm",
            ],
            "--plan-only runs nothing",
        ),
    ],
)
def test_plan_and_judge_usage_errors(capsys, tmp_path, monkeypatch, arguments, says):
    monkeypatch.chdir(tmp_path)
    assert main(arguments) == 4
    assert says in capsys.readouterr().err
