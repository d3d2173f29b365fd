"""A check from one command line: CommandCase, its template rules, `trainparity resume/runs -- CMD`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from trainparity import check_resume
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.cli.main import main
from trainparity.protocols import ProcessExecutionPlan, ProcessResumeCase, RunsCase

# The resume quickstart's training script, driven by flags as a user's train.py is.
QUICKSTART = [sys.executable, "-m", "trainparity.quickstarts.resume", "worker"]
TEMPLATE = [
    *QUICKSTART,
    "--run-dir",
    "{run_dir}",
    "--end-step",
    "{end_step}",
    "--resume-from",
    "{resume_from?}",
]
CHECKPOINT = "{run_dir}/checkpoint.pt"
# The options of a resume command template, before `--`.
OPTIONS = ["--split-step", "2", "--total-step", "4", "--checkpoint", CHECKPOINT]


def _plan(resume_from: Path | None = None) -> ProcessExecutionPlan:
    return ProcessExecutionPlan(
        phase="candidate_resume",
        cwd=Path("/project"),
        run_dir=Path("/runs/candidate_resume"),
        end_step=4,
        resume_from=resume_from,
    )


def test_the_template_fills_every_placeholder_and_drops_an_absent_resume_with_its_flag():
    case = CommandCase(
        template=[
            "train.py",
            "--ckpt={checkpoint}",
            "--end-step",
            "{end_step}",
            "--tag",
            "{phase}@{cwd}",
            "--literal",
            "{{run_dir}}",
            "--resume",
            "{resume_from?}",
            "--also={resume_from?}",
        ],
        checkpoint="{run_dir}/out/ck.pt",
        split_step=2,
        total_step=4,
    )
    assert isinstance(case, ProcessResumeCase) and isinstance(case, RunsCase)
    fresh = case.command(_plan())
    assert fresh == [
        "train.py",
        "--ckpt=/runs/candidate_resume/out/ck.pt",
        "--end-step",
        "4",
        "--tag",
        "candidate_resume@/project",
        "--literal",
        "{run_dir}",
    ]
    resumed = case.command(_plan(Path("/runs/staged.pt")))
    assert resumed[-3:] == ["--resume", "/runs/staged.pt", "--also=/runs/staged.pt"]
    assert case.checkpoint_path(Path("/r")) == Path("/r/out/ck.pt")
    assert CommandCase.from_spec(case.spec) == case


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"template": ["t.py", "{chekpoint}"]}, "unknown placeholder {chekpoint}"),
        ({"template": ["t.py", "{checkpoint}", "{resume_from}"]}, "write {resume_from?}"),
        ({"template": ["t.py", "{checkpoint", "{end_step}"]}, "unmatched '{'"),
        ({"template": []}, "the command template is empty"),
        ({"checkpoint": "/tmp/ck.pt"}, "outside {run_dir}"),
        ({"checkpoint": "{run_dir}/../ck.pt"}, "outside {run_dir}"),
        ({"checkpoint": "{run_dir}"}, "outside {run_dir}"),
        ({"checkpoint": "{run_dir}/{phase}.pt"}, "may use {run_dir} only"),
        ({"template": ["t.py", "--end-step", "{end_step}"]}, "never says where to save"),
        ({"template": ["t.py", "{checkpoint}", "{resume_from?}"]}, "needs {end_step}"),
        ({"observe": "no_colon"}, "'module:function'"),
    ],
)
def test_bad_templates_are_value_errors_that_say_what_is_wrong(fields, says):
    arguments = {
        "template": ["t.py", "{checkpoint}", "{end_step}", "{resume_from?}"],
        "checkpoint": "{run_dir}/ck.pt",
        "split_step": 2,
        "total_step": 4,
        **fields,
    }
    with pytest.raises(ValueError, match=None) as raised:
        CommandCase(**arguments)
    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (OPTIONS, "training command after --"),
        (["--split-step", "2", "--checkpoint", CHECKPOINT, "--", "t.py"], "needs --total-step"),
        (["a:B", "--", "t.py"], "not both"),
        (["a:B", "--checkpoint", CHECKPOINT], "belongs to a command template"),
        (
            [*OPTIONS[:-1], "ck.pt", "--", "t.py", "{checkpoint}"],
            "outside {run_dir}",
        ),
        (
            [
                *OPTIONS,
                "--",
                "t.py",
                "{ckpt}",
            ],
            "unknown placeholder {ckpt}",
        ),
    ],
)
def test_command_line_template_mistakes_are_usage_errors(capsys, arguments, says):
    assert main(["resume", *arguments]) == 4
    assert says in capsys.readouterr().err


def test_an_observer_that_cannot_be_imported_is_a_usage_error(capsys, tmp_path):
    code = main(
        [
            "resume",
            "--cwd",
            str(tmp_path),
            *OPTIONS,
            "--observe",
            "no_such_module_here:observe",
            "--",
            *TEMPLATE,
        ]
    )
    assert code == 4
    assert "cannot import observer 'no_such_module_here:observe'" in capsys.readouterr().err


def test_a_faulty_resume_fails_from_one_command_line(capsys, tmp_path):
    code = main(
        [
            "resume",
            "--json",
            *OPTIONS,
            "--",
            *TEMPLATE,
            "--fault",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (1, "FAIL")
    assert report["primary_difference"]["path"] == "scheduler.last_epoch"
    assert report["case"].endswith("--resume-from '{resume_from?}' --fault")


def test_a_clean_resume_passes_through_the_api_with_a_custom_observer(tmp_path):
    (tmp_path / "observers.py").write_text(
        "import torch\n"
        "def model_only(path):\n"
        "    return {'model': torch.load(path, weights_only=True)['model']}\n",
        encoding="utf-8",
    )
    sys.path.insert(0, str(tmp_path))
    try:
        case = CommandCase(
            template=TEMPLATE,
            checkpoint=CHECKPOINT,
            split_step=2,
            total_step=4,
            observe="observers:model_only",
        )
        result = check_resume(case, cwd=tmp_path, work_dir=tmp_path / "work")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("observers", None)
    assert result.outcome == "PASS", result.message
    snapshot = tmp_path / "work" / "snapshots" / "candidate_resume.safetensors"
    assert snapshot.is_file()
    assert torch.load(tmp_path / "work" / "candidate_resume" / "checkpoint.pt")["step"] == 4


def test_runs_takes_the_same_template_and_its_variants(capsys):
    code = main(
        [
            "runs",
            "--json",
            "--total-step",
            "3",
            "--checkpoint",
            CHECKPOINT,
            "--variant",
            "plain=",
            "--variant",
            "again=--end-step 3",
            "--",
            *QUICKSTART,
            "--run-dir",
            "{run_dir}",
            "--end-step",
            "{end_step}",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (0, "PASS"), report["message"]
    assert report["variants"] == ["plain", "again"]
