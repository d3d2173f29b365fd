"""Command templates: each phase in its own run directory (--cd-run-dir), and which python runs.

The checks here run a script that saves `checkpoint.pth.tar` into its
working directory, as torchvision's ImageNet example does, with a fake
`python` first on PATH that fails loudly if anything runs it: `python` in a
template is the interpreter running the check.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from trainparity import check_resume
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.cases.loading import CaseSetupError
from trainparity._internal.cli.main import main
from trainparity._internal.reports.text_views import text_report
from trainparity.protocols import ProcessExecutionPlan

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TEMPLATE = ["python", "train.py", "--end-step", "{end_step}", "--resume", "{resume_from?}"]
OPTIONS = ["--split-step", "2", "--total-step", "4"]
CHECKPOINT = "{run_dir}/checkpoint.pth.tar"
FAKE_PYTHON_STATUS = 97


def _plan(phase: str = "baseline_a") -> ProcessExecutionPlan:
    return ProcessExecutionPlan(phase, Path("/project"), Path(f"/runs/{phase}"), 4)


def test_python_is_the_checks_interpreter_and_a_moved_phase_finds_its_program_and_script():
    here = CommandCase(
        template=["python3", "-u", "train.py", "{checkpoint}"], checkpoint=CHECKPOINT, total_step=4
    )
    assert here.command(_plan()) == [
        sys.executable,
        "-u",
        "train.py",
        "/runs/baseline_a/checkpoint.pth.tar",
    ]
    assert here.phase_cwd(_plan()) == Path("/project")

    def moved(*template: str) -> list[str]:
        case = CommandCase(template=template, checkpoint=CHECKPOINT, total_step=4, cwd="{run_dir}")
        assert case.phase_cwd(_plan()) == Path("/runs/baseline_a")
        assert CommandCase.from_spec(case.spec) == case
        return case.command(_plan())

    # The program and a Python interpreter's script: from the check's cwd; nothing else.
    assert moved("python", "-W", "error", "train.py", "data.csv") == [
        sys.executable,
        "-W",
        "error",
        "/project/train.py",
        "data.csv",
    ]
    assert moved("./venv/bin/python", "train.py") == [
        "/project/venv/bin/python",
        "/project/train.py",
    ]
    assert moved("/usr/bin/python3", "/abs/train.py") == ["/usr/bin/python3", "/abs/train.py"]
    assert moved("python", "-m", "package.train", "x.py") == [
        sys.executable,
        "-m",
        "package.train",
        "x.py",
    ]
    # A console script installed beside the check's interpreter runs from there (the venv's
    # torchrun, even when the venv is not activated); other words are left to the PATH.
    assert moved("torchrun", "--nproc-per-node", "2", "train.py") == [
        str(Path(sys.executable).parent / "torchrun"),
        "--nproc-per-node",
        "2",
        "train.py",
    ]
    assert moved("bash", "run.sh") == ["bash", "run.sh"]
    with pytest.raises(CaseSetupError, match="cwd must be None"):
        CommandCase(template=TEMPLATE, checkpoint=CHECKPOINT, total_step=4, cwd="/elsewhere")
    with pytest.raises(CaseSetupError, match="--cd-run-dir"):
        CommandCase(template=["python", "train.py"], checkpoint=CHECKPOINT, total_step=4)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory with train.py, and a fake `python` first on the children's PATH."""
    directory = tmp_path / "project"
    directory.mkdir()
    shutil.copy(FIXTURES / "cwd_checkpoint_train.py", directory / "train.py")
    fakes = tmp_path / "fake-bin"
    fakes.mkdir()
    for name in ("python", "python3"):
        fake = fakes / name
        fake.write_text(f"#!/bin/sh\necho 'the fake {name} ran' >&2\nexit {FAKE_PYTHON_STATUS}\n")
        fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fakes}:{Path(sys.executable).parent}:/usr/bin:/bin")
    assert shutil.which("python") == str(fakes / "python")
    return directory


def test_a_console_script_beside_the_interpreter_is_described_as_such(tmp_path):
    case = CommandCase(
        template=["torchrun", "--standalone", "train.py", "{checkpoint}"],
        checkpoint=CHECKPOINT,
        total_step=4,
    )
    beside = str(Path(sys.executable).parent / "torchrun")
    described = case.command_interpreter(search_path="/usr/bin:/bin", directory=tmp_path)
    assert described == f"{beside} (torchrun: installed beside the interpreter running the check)"


def test_a_script_that_saves_into_its_cwd_passes_with_cd_run_dir(capsys, project, tmp_path):
    work = tmp_path / "work"
    arguments = ["--cwd", str(project), "--work-dir", str(work), "--checkpoint", CHECKPOINT]
    options = [*OPTIONS, *arguments, "--cd-run-dir", "--start", "warm"]
    code = main(["resume", "--json", *options, "--env", "PYTHONHASHSEED=0", "--", *TEMPLATE])
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (0, "PASS"), report["message"]
    # Forked from a warm server, which moved into each phase's run directory too.
    warm = set(report["environment"]["child_start"]["warm"])
    assert {"baseline_a", "baseline_b", "candidate_split", "candidate_resume"} <= warm, warm
    assert report["command_interpreter"] == (
        f"{sys.executable} (python: the interpreter running the check)"
    )
    assert report["command_cwd"].startswith("{run_dir}: each phase in its own run directory")
    steps = {
        phase: torch.load(work / phase / "checkpoint.pth.tar")["step"]
        for phase in ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")
    }
    assert steps == {"baseline_a": 4, "baseline_b": 4, "candidate_split": 2, "candidate_resume": 4}
    assert not (project / "checkpoint.pth.tar").exists()
    text = text_report(report)
    interpreter = re.escape(f"{sys.executable} (python: the interpreter running the check)")
    assert re.search(rf"\n  command interpreter +{interpreter}\n", text), text
    assert re.search(r"\n  command cwd +\{run_dir\}: each phase in its own run directory", text)


def test_without_cd_run_dir_a_script_that_saves_into_its_cwd_is_a_usage_error(capsys, project):
    # Without the option every phase would write the one checkpoint.pth.tar in the check's cwd:
    # the template names no place to save, so the check refuses before anything runs.
    code = main(
        ["resume", *OPTIONS, "--cwd", str(project), "--checkpoint", CHECKPOINT, "--", *TEMPLATE]
    )
    error = capsys.readouterr().err
    assert code == 4, error  # a usage error
    assert "the command never says where to save" in error and "--cd-run-dir" in error
    assert not (project / "checkpoint.pth.tar").exists()


def test_a_foreign_interpreter_without_a_module_is_named_in_the_error(tmp_path):
    foreign = tmp_path / "other-env" / "bin" / "python3"
    foreign.parent.mkdir(parents=True)
    foreign.write_text(
        "#!/bin/sh\necho 'ModuleNotFoundError: No module named '\"'torch'\" >&2\nexit 1\n"
    )
    foreign.chmod(0o755)
    case = CommandCase(
        template=[str(foreign), "train.py", "{checkpoint}", "{end_step}", "{resume_from?}"],
        checkpoint=CHECKPOINT,
        split_step=2,
        total_step=4,
    )
    result = check_resume(case, cwd=tmp_path)
    assert result.outcome == "ERROR"
    assert result.message.startswith("baseline_a child exited with status 1")
    assert (
        f"the phase ran the interpreter {foreign}, not the one running this check "
        f"({sys.executable})"
    ) in result.message
    assert result.to_dict()["command_interpreter"] == f"{foreign} (a path given in the command)"


def test_plan_only_scripts_run_each_phase_in_its_run_directory(capsys, project, tmp_path):
    plan = tmp_path / "plan"
    options = ["--cwd", str(project), "--checkpoint", CHECKPOINT, "--cd-run-dir"]
    assert main(["resume", "--plan-only", str(plan), *OPTIONS, *options, "--", *TEMPLATE]) == 0
    phase = json.loads((plan / "plan.json").read_text())["phases"][0]
    assert phase["cwd"] == phase["run_dir"] == str(plan / "baseline_a")
    assert phase["argv"][:2] == [sys.executable, str(project / "train.py")]
    completed = subprocess.run(
        [plan / "baseline_a.sh"], capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, (plan / "baseline_a" / "stderr.log").read_text()
    assert torch.load(plan / "baseline_a" / "checkpoint.pth.tar")["step"] == 4
