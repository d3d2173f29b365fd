"""Every child of a check gets a temporary directory of the check's, removed when it ends.

A child the check stops (a timeout, an interrupted check, its observer still
starting when the check ends) may leave what it had begun in its TMPDIR: CPython's
tempfile probes a directory by creating a file and removing it, and `import torch`
runs that probe. A child that never cleans up leaves its files there too. In a
directory of the check's (processes/run_directory.py, children_temporary_directory)
they go away with the check; the caller's temporary root stays as it was. That
directory is not under the run directory: multiprocessing makes AF_UNIX sockets in
TMPDIR, whose paths hold at most 107 bytes, and a deep work_dir would pass that.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trainparity import (
    AccumulationExecutionPlan,
    ToleranceComparison,
    check_accumulation,
    check_resume,
)
from trainparity._internal.cases.command_case import CommandCase

# The resume quickstart's worker, run by a script that leaves a temporary file behind
# and writes down where TMPDIR pointed.
UNTIDY_WORKER = """\
import os, runpy, sys, tempfile
descriptor, path = tempfile.mkstemp(prefix="left-by-a-phase-")
os.close(descriptor)
with open(os.path.join(os.environ["SEEN_DIRECTORY"], f"{os.getpid()}.txt"), "w") as seen:
    seen.write(path)
sys.argv = ["worker", "worker", *sys.argv[1:]]
runpy.run_module("trainparity.quickstarts.resume", run_name="__main__")
"""


def test_a_phases_temporary_files_go_away_with_the_check(tmp_path):
    project, seen, callers = (tmp_path / name for name in ("project", "seen", "callers_tmp"))
    for directory in (project, seen, callers):
        directory.mkdir()
    (project / "untidy.py").write_text(UNTIDY_WORKER)
    case = CommandCase(
        template=[sys.executable, "untidy.py", "--run-dir", "{run_dir}"]
        + ["--end-step", "{end_step}", "--resume-from", "{resume_from?}"],
        checkpoint="{run_dir}/checkpoint.pt",
        split_step=2,
        total_step=4,
    )
    environment = {**os.environ, "TMPDIR": str(callers), "SEEN_DIRECTORY": str(seen)}

    result = check_resume(
        case, cwd=project, environment=environment, work_dir=tmp_path / "work", start="warm"
    )

    assert result.outcome == "PASS", result.message
    left = [Path(path.read_text()) for path in seen.iterdir()]
    assert len(left) == 4  # baseline_a, baseline_b, candidate_split, candidate_resume
    (temporary,) = {path.parent for path in left}  # one for the whole check
    assert temporary.parent == callers and temporary.name.startswith("trainparity-tmp-")
    assert list(callers.iterdir()) == []  # that directory is gone, and nothing else was left


def test_an_accumulation_workers_temporary_root_goes_away_with_the_check(tmp_path, monkeypatch):
    callers = tmp_path / "callers_tmp"
    callers.mkdir()
    # Where torch._dynamo (imported by the workers' optimizers) puts its cache unless told:
    # in TMPDIR. The suite points it elsewhere (tests/temp_guard.py); this check does not.
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    environment = {**os.environ, "TMPDIR": str(callers), "OMP_NUM_THREADS": "1"}

    result = check_accumulation(
        "trainparity.quickstarts.accumulation:Case",
        candidate=AccumulationExecutionPlan(2),
        comparison=ToleranceComparison(rtol=1e-6, atol=1e-7),
        environment=environment,
        temporary_root=tmp_path / "runs",
        # Fresh: each worker imports torch._dynamo itself, in the TMPDIR it was given (a
        # warm server of the suite may have imported it already, with the suite's cache).
        start="fresh",
    )

    assert result.outcome == "PASS", result.message
    # torch's import ran tempfile's probe in each worker, and torch._dynamo made its cache
    # directory: in the run directory's tmp, removed with it.
    assert list(callers.iterdir()) == []
    assert list((tmp_path / "runs").iterdir()) == []


# A torchrun rank that does what a DataLoader worker does to pass a tensor's descriptor:
# open a multiprocessing listener, an AF_UNIX socket in TMPDIR/pymp-*/.
SOCKET_JOB = """\
import argparse, multiprocessing.connection, torch
parser = argparse.ArgumentParser()
parser.add_argument("--checkpoint")
parser.add_argument("--end-step", type=int)
parser.add_argument("--resume")
arguments = parser.parse_args()
with multiprocessing.connection.Listener(family="AF_UNIX"):
    pass
torch.save({"weight": torch.arange(3.0) * arguments.end_step}, arguments.checkpoint)
"""


def test_a_torchrun_rank_opens_a_unix_socket_under_a_deep_work_dir(tmp_path):
    # Under <run directory>/tmp, a work_dir this deep put the socket's path past 107 bytes:
    # `OSError: AF_UNIX path too long` (a DataLoader's workers then wait for the timeout).
    (tmp_path / "socket_job.py").write_text(SOCKET_JOB)
    work_dir = tmp_path / "work_dir_of_a_project"
    socket_under_the_run_directory = work_dir / "tmp" / "pymp-12345678" / "listener-12345678"
    assert len(str(socket_under_the_run_directory)) > 107
    case = CommandCase(
        template=[sys.executable, "-m", "torch.distributed.run", "--standalone"]
        + ["--nproc-per-node", "1", "socket_job.py", "--checkpoint", "{checkpoint}"]
        + ["--end-step", "{end_step}", "--resume", "{resume_from?}"],
        checkpoint="{run_dir}/checkpoint.pt",
        split_step=1,
        total_step=2,
    )

    result = check_resume(case, cwd=tmp_path, work_dir=work_dir, start="warm")

    assert result.outcome == "PASS", result.message
