"""SlurmExecutor against a real single-node SLURM cluster (tests/slurm_cluster.py).

The resume quickstart's faulty case (command line, `--executor slurm`) and
clean case (Python API, as a command template), the docs' 2-rank
torchrun/DCP project, a job that SLURM cancels, and SIGTERM to a running
check: every verdict and report key is the local one, with job ids in
`processes`; no job outlives its check.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from trainparity import check_resume
from trainparity._internal.cases.command_case import CommandCase
from trainparity._internal.cli.main import main
from trainparity.executors import SlurmExecutor

from tests.test_command_case import CHECKPOINT, TEMPLATE

REPO = Path(__file__).resolve().parent.parent
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _jobs(slurm) -> list[str]:
    """Jobs the cluster still has queued or running."""
    listed = subprocess.run(
        ["squeue", "-h", "-t", "PD,R,CG,CF,S", "-o", "%i %T"],
        env=slurm.environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return listed.stdout.split("\n")[:-1]


def _job_ids(report: dict) -> list[str]:
    return [process["job_id"] for process in report["processes"]]


def test_the_executor_needs_no_submitit_until_a_check_uses_it():
    code = "import sys, trainparity.executors; print('submitit' in sys.modules)"
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert imported.stdout.strip() == "False", imported.stderr


def test_a_faulty_resume_fails_on_slurm_with_a_job_per_phase(slurm, capsys, tmp_path):
    code = main(
        [
            "resume",
            "trainparity.quickstarts.resume:FaultyCase",
            "--executor",
            "slurm",
            "--work-dir",
            str(tmp_path / "work"),
            "--env",
            "OMP_NUM_THREADS=1",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert (code, report["outcome"]) == (1, "FAIL"), report["message"]
    assert report["primary_difference"]["path"] == "scheduler.last_epoch"
    jobs = _job_ids(report)
    assert len(set(jobs)) == 4 and all(job.isdigit() for job in jobs)
    assert [process["phase"] for process in report["processes"]] == [
        "baseline_a",
        "baseline_b",
        "candidate_split",
        "candidate_resume",
    ]
    assert _jobs(slurm) == []


def test_a_clean_command_template_passes_on_slurm_with_progress(slurm, tmp_path):
    events = []
    case = CommandCase(template=TEMPLATE, checkpoint=CHECKPOINT, split_step=2, total_step=4)
    result = check_resume(
        case,
        cwd=tmp_path,
        temporary_root=tmp_path,  # the run directory must be where every node sees it
        environment=ONE_THREAD,
        executor=SlurmExecutor(poll_seconds=0.1),
        progress=events.append,
    )
    assert result.outcome == "PASS", result.message
    details = [event.detail for event in events if event.kind == "state"]
    assert any(detail.endswith("RUNNING on localhost") for detail in details), details
    assert all(process.job_id for process in result.processes)
    assert list(tmp_path.iterdir()) == [], "the temporary run directory is removed"


def test_a_job_that_slurm_cancels_is_an_error_that_names_it(slurm, tmp_path):
    # The phase cancels its own job: SLURM ends it CANCELLED, with no result.
    template = ["sh", "-c", 'scancel "$SLURM_JOB_ID"; sleep 60', "{checkpoint}", "{end_step}"]
    case = CommandCase(
        template=[*template, "{resume_from?}"], checkpoint=CHECKPOINT, split_step=1, total_step=2
    )
    result = check_resume(
        case, cwd=tmp_path, work_dir=tmp_path / "work", executor=SlurmExecutor(), parallel=False
    )
    assert result.outcome == "ERROR"
    assert result.message.startswith("baseline_a's job "), result.message
    assert " ended CANCELLED" in result.message.splitlines()[0]
    assert _jobs(slurm) == []


def test_sigterm_cancels_every_job_and_removes_the_run_directory(slurm, tmp_path):
    environment = {**os.environ, "TMPDIR": str(tmp_path), **ONE_THREAD}
    template = ["sh", "-c", "sleep 120", "{checkpoint}", "{end_step}", "{resume_from?}"]
    check = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainparity",
            "resume",
            "--executor",
            "slurm",
            "--split-step",
            "1",
            "--total-step",
            "2",
            "--checkpoint",
            CHECKPOINT,
            "--",
            *template,
        ],
        env=environment,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while sum(" RUNNING" in job for job in _jobs(slurm)) < 3:  # the three first phases
        assert check.poll() is None, check.communicate()
        assert time.monotonic() < deadline, "the phases never ran"
        time.sleep(0.2)
    check.send_signal(signal.SIGTERM)
    _, stderr = check.communicate(timeout=60)
    assert check.returncode == -signal.SIGTERM, stderr
    deadline = time.monotonic() + 30
    while _jobs(slurm):  # cancelled jobs stay COMPLETING for KillWait at most
        assert time.monotonic() < deadline, _jobs(slurm)
        time.sleep(0.2)
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith("trainparity")] == []


def test_the_two_rank_guide_project_passes_on_slurm(slurm, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(
        REPO / "docs" / "examples" / "distributed_project",
        project,
        ignore=shutil.ignore_patterns(".trainparity-runs", "trainparity-report*", "__pycache__"),
    )
    sys.path.insert(0, str(project))
    sys.modules.pop("parity_case", None)  # another project's, imported by an earlier test
    try:
        result = check_resume(
            "parity_case:DistributedResumeCase",
            cwd=project,
            work_dir=project / "runs",
            environment={**ONE_THREAD, "PYTHONHASHSEED": "0"},
            executor=SlurmExecutor(),
        )
    finally:
        sys.path.remove(str(project))
        sys.modules.pop("parity_case", None)
    assert result.outcome == "PASS", result.message
    for process in result.processes:
        assert process.job_id and [rank.rank for rank in process.ranks] == [0, 1]
    assert _jobs(slurm) == []
