"""check_resume's command form with a job that resumes by itself (no {resume_from?}).

tests/fixtures/self_resume_train.py is written as scheduler-run jobs are:
`--out-dir DIR --stop-after N`, and it resumes from the newest `step_{k}.pt`
it finds in DIR. The check stages candidate_split's checkpoint directory at
candidate_resume's own checkpoint path and runs the same command there; the
job must find it by itself.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from trainparity import CommandCase, Outcome, check_resume
from trainparity._internal.cases.command_case import clear_checkpoint
from trainparity._internal.cli.main import main
from trainparity._internal.resume.plan import write_plan

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "tests/fixtures/self_resume_train.py"
OBSERVE = "tests.fixtures.self_resume_train:newest_checkpoint"
# The job as a scheduler runs it: where it saves and when it stops, nothing about resuming.
TEMPLATE = ["python", SCRIPT, "--out-dir", "{checkpoint}", "--stop-after", "{end_step}"]
CHECKPOINT = "{run_dir}/ckpts"


def _case(*extra: str) -> CommandCase:
    return CommandCase(
        template=[*TEMPLATE, *extra],
        checkpoint=CHECKPOINT,
        split_step=2,
        total_step=4,
        observe=OBSERVE,
    )


def test_a_template_without_resume_from_resumes_by_itself_but_still_needs_end_step(capsys):
    assert _case().resumes_by_itself
    assert not CommandCase(
        template=[*TEMPLATE, "--resume", "{resume_from?}"],
        checkpoint=CHECKPOINT,
        split_step=2,
        total_step=4,
    ).resumes_by_itself
    with pytest.raises(ValueError, match=r"needs \{end_step\}: it says where each phase stops"):
        CommandCase(
            template=["python", SCRIPT, "--out-dir", "{checkpoint}"],
            checkpoint=CHECKPOINT,
            split_step=2,
            total_step=4,
        )
    code = main(
        [
            "resume",
            *("--split-step", "2", "--total-step", "4", "--checkpoint", CHECKPOINT),
            *("--", "python", SCRIPT, "--out-dir", "{checkpoint}"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 4
    assert "needs {end_step}" in err and "{resume_from?}" not in err


def test_only_a_self_resuming_cases_checkpoint_is_cleared_file_or_directory(tmp_path):
    file_case = CommandCase(
        template=["python", SCRIPT, "--resume-from-if-any", "{checkpoint}", "{end_step}"],
        checkpoint="{run_dir}/last.pt",
        split_step=2,
        total_step=4,
    )
    flagged = CommandCase(
        template=[*TEMPLATE, "--resume", "{resume_from?}"],
        checkpoint=CHECKPOINT,
        split_step=2,
        total_step=4,
    )
    (tmp_path / "ckpts").mkdir()
    (tmp_path / "ckpts" / "step_4.pt").write_bytes(b"left by the last check")
    (tmp_path / "last.pt").write_bytes(b"left by the last check")
    clear_checkpoint(flagged, tmp_path)  # told what to load: what lies there is its output
    clear_checkpoint("package.module:Case", tmp_path)  # a case class's path may lie anywhere
    assert (tmp_path / "ckpts" / "step_4.pt").exists()
    clear_checkpoint(file_case, tmp_path)
    clear_checkpoint(_case(), tmp_path)
    assert sorted(tmp_path.iterdir()) == []
    clear_checkpoint(_case(), tmp_path)  # nothing there: nothing to do


def test_a_job_that_resumes_by_itself_passes_over_a_kept_work_dirs_leftovers(tmp_path):
    work = tmp_path / "work"
    # A kept work_dir's last check left a later checkpoint in each phase's directory: a job
    # that resumes by itself would load it instead of starting at step 0 (or at the split).
    torch.manual_seed(1)
    stale = {"step": 4, "model": {"0.weight": torch.randn(4, 3)}}
    for phase in ("baseline_a", "baseline_b", "candidate_split", "candidate_resume"):
        (work / phase / "ckpts").mkdir(parents=True)
        torch.save(stale, work / phase / "ckpts" / "step_4.pt")
    report_path = tmp_path / "report.json"
    result = check_resume(_case("--record"), cwd=REPO_ROOT, work_dir=work, report_path=report_path)
    assert result.outcome is Outcome.PASS, result.message
    report = json.loads(report_path.read_text())
    assert report["trajectory"]["recorded_steps"]["candidate_resume"] == [2, 3, 4]
    assert report["command_case"]["template"] == [*TEMPLATE, "--record"]
    resumed = work / "candidate_resume" / "ckpts"
    assert sorted(path.name for path in resumed.iterdir()) == ["step_2.pt", "step_4.pt"]
    split = work / "candidate_split" / "ckpts" / "step_2.pt"
    assert (resumed / "step_2.pt").read_bytes() == split.read_bytes()
    pids = {process["phase"]: process["pid"] for process in report["processes"]}
    assert pids["candidate_split"] != pids["candidate_resume"]


@pytest.mark.parametrize(
    ("extra", "step", "first", "among"),
    [
        # Recorded: the record taken right after loading is where the state is missing.
        (
            ("--record", "--fault", "optimizer"),
            2,
            "optimizer.param_groups[0].lr",
            'optimizer.state["0"]',
        ),
        (("--record", "--fault", "scheduler"), 2, "scheduler._last_lr[0]", "scheduler.last_epoch"),
        # Not recorded: the final state, where the restarted warm-up changed the model too.
        (("--fault", "scheduler"), 4, 'model["0.bias"]', "scheduler.last_epoch"),
    ],
)
def test_an_auto_resume_that_forgets_a_state_fails_at_its_path(tmp_path, extra, step, first, among):
    result = check_resume(_case(*extra), cwd=REPO_ROOT, temporary_root=tmp_path)
    assert result.outcome is Outcome.FAIL, result.message
    assert result.first_divergent_step == step
    assert result.primary_difference.path == first
    assert among in [difference.path for difference in result.all_differences]
    if "--record" in extra:  # the first record after loading names only the forgotten state
        forgotten = extra[-1]
        assert all(d.path.startswith(forgotten) for d in result.all_differences)


def test_an_auto_resume_that_finds_nothing_and_starts_over_fails_when_it_records(tmp_path):
    # It ends in the uninterrupted state: only its records show it started at 0, not at 2.
    result = check_resume(
        _case("--record", "--fault", "name"), cwd=REPO_ROOT, temporary_root=tmp_path
    )
    assert result.outcome is Outcome.FAIL, result.message
    paths = [difference.path for difference in result.all_differences]
    # The samples of steps 1 and 2 taken again lead; the first record claims step 0.
    assert result.primary_difference.reason == "sample_repeated"
    assert "step" in paths


def test_a_chain_of_self_resumes_in_each_run_directory_passes_from_the_command_line(capsys):
    code = main(
        [
            "resume",
            "--json",
            *("--cwd", str(REPO_ROOT), "--cd-run-dir"),
            *("--split-steps", "2,4", "--total-step", "6"),
            *("--checkpoint", CHECKPOINT, "--observe", OBSERVE),
            # Saved and found relative to the phase's run directory, its working directory.
            *("--", "python", SCRIPT, "--out-dir", "ckpts", "--stop-after", "{end_step}"),
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (0, "PASS"), report["message"]
    assert [link["phase"] for link in report["resume_chain"]] == [
        "candidate_split",
        "candidate_resume_1",
        "candidate_resume",
    ]
    assert report["command_case"]["cwd"] == "{run_dir}"


def test_a_plan_stages_the_checkpoint_and_runs_the_same_command(tmp_path):
    plan = write_plan(_case(), tmp_path / "plan", cwd=REPO_ROOT)
    phases = {phase["name"]: phase for phase in plan["phases"]}
    split, resumed = phases["candidate_split"], phases["candidate_resume"]
    # The same command, but where it saves and when it stops: nothing says what to resume.
    assert resumed["argv"] == [
        sys.executable,
        SCRIPT,
        "--out-dir",
        resumed["checkpoint"],
        "--stop-after",
        "4",
    ]
    assert [item for item in split["argv"] if item not in (split["checkpoint"], "2")] == [
        item for item in resumed["argv"] if item not in (resumed["checkpoint"], "4")
    ]
    script = (tmp_path / "plan" / "candidate_resume.sh").read_text()
    assert f"cp -R {split['checkpoint']} {resumed['checkpoint']}" in script
    # A phase from step 0 starts with nothing at its checkpoint path to resume from.
    baseline = (tmp_path / "plan" / "baseline_a.sh").read_text()
    assert f"rm -rf {phases['baseline_a']['checkpoint']} || exit 1" in baseline
