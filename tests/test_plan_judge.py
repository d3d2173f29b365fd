"""`trainparity resume --plan-only DIR` + `trainparity judge DIR`: phases run by hand, verdict by us.

The plan's shell scripts run as a user (or any scheduler) would run them;
judge then gives the verdict and the report of a check that ran them itself
(report pins' volatile keys aside), and names the phase whose outputs are
missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from trainparity._internal.cli.main import main
from trainparity._internal.reports.machine import report_text

from tests.test_command_case import OPTIONS, TEMPLATE
from tests.test_report_pins import GOLDEN, pinned_form

PHASES = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")
ONE_THREAD = {**os.environ, "OMP_NUM_THREADS": "1"}


def _run_plan(directory: Path) -> None:
    """The scripts as a scheduler would run them: the first three at once, then candidate_resume."""
    first = [
        subprocess.Popen(["sh", str(directory / f"{phase}.sh")], env=ONE_THREAD)
        for phase in PHASES[:3]
    ]
    assert [script.wait(timeout=300) for script in first] == [0, 0, 0]
    subprocess.run(
        ["sh", str(directory / "candidate_resume.sh")], env=ONE_THREAD, check=True, timeout=300
    )


def _judge(capsys, directory: Path, *options: str) -> tuple[int, dict]:
    code = main(["judge", str(directory), "--json", *options])
    return code, json.loads(capsys.readouterr().out)


def _comparable(report: dict) -> str:
    """The report as the quickstart pins compare it (the machine, the moment and job ids aside)."""
    form = pinned_form(json.loads(json.dumps(report)))
    del form["environment_leads"]  # judge's own: the machines that ran the phases
    for row in form["processes"]:
        row.pop("job_id", None)  # a phase judge ran itself has none, as in a local check
    return report_text(form)


def test_a_faulty_case_planned_run_by_hand_and_judged_fails_as_a_local_check(capsys, tmp_path):
    plan = tmp_path / "plan"
    assert (
        main(["resume", "trainparity.quickstarts.resume:FaultyCase", "--plan-only", str(plan)]) == 0
    )
    written = json.loads((plan / "plan.json").read_text(encoding="utf-8"))
    assert [phase["name"] for phase in written["phases"]] == list(PHASES)
    assert written["phases"][3]["after"] == ["candidate_split"]
    assert "plan written to" in capsys.readouterr().out
    _run_plan(plan)

    code, judged = _judge(capsys, plan)
    assert (code, judged["outcome"]) == (1, "FAIL"), judged["message"]
    # The very report a local check of the quickstart's faulty case gives (its pin).
    local = json.loads((GOLDEN / "quickstart_resume.json").read_text(encoding="utf-8"))
    assert _comparable(judged) == report_text(local["intentional_fail"])
    assert judged["environment_leads"] == [], "every phase ran on this machine"

    # candidate_resume's machine as another one would be: its difference is a lead.
    recorded = plan / "candidate_resume" / "environment.json"
    other = json.loads(recorded.read_text(encoding="utf-8"))
    other["environment"]["torch"]["version"] = "0.0.0-elsewhere"
    recorded.write_text(json.dumps(other), encoding="utf-8")
    code, judged = _judge(capsys, plan)
    assert (code, judged["outcome"]) == (1, "FAIL")
    leads = {lead["key"]: lead for lead in judged["environment_leads"]}
    assert leads["torch.version"]["candidate"] == "0.0.0-elsewhere"
    assert leads["torch.version"]["category"] == "library_version"

    # Partial outputs: the phase that left no result is named.
    (plan / "candidate_resume" / "phase-result.json").unlink()
    code, judged = _judge(capsys, plan)
    assert (code, judged["outcome"]) == (3, "ERROR")
    assert judged["message"].startswith("candidate_resume's job "), judged["message"]
    assert "run candidate_resume.sh" in judged["message"]

    # --run-missing runs it here as the check would, its checkpoint staged again (its whole
    # directory is gone), and writes the result file its script would have written.
    shutil.rmtree(plan / "candidate_resume")
    code, judged = _judge(capsys, plan, "--run-missing")
    assert (code, judged["outcome"]) == (1, "FAIL"), judged["message"]
    assert _comparable(judged) == report_text(local["intentional_fail"])
    ran_here = json.loads((plan / "candidate_resume" / "phase-result.json").read_text())
    assert ran_here["exit_code"] == 0 and ran_here["pid"] > 0
    rows = {row["phase"]: row for row in judged["processes"]}
    assert rows["candidate_resume"]["pid"] == ran_here["pid"]
    assert rows["baseline_a"]["job_id"] == str(plan.resolve() / "baseline_a.sh")  # still read
    code, judged = _judge(capsys, plan)  # a later judge reads what it left
    assert (code, judged["outcome"]) == (1, "FAIL")
    assert {row["phase"]: row["pid"] for row in judged["processes"]} == {
        phase: row["pid"] for phase, row in rows.items()
    }


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
