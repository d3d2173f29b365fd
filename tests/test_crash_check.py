"""check_crashes' surface: what it refuses, ERROR and ABSTAIN, the report, the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trainparity
from trainparity import CommandCase, check_crashes
from trainparity._internal.processes.traced_job import tracing_available
from trainparity._internal.reports.text_views import text_report

pytestmark = pytest.mark.skipif(not tracing_available(), reason="needs Linux x86-64/AArch64")

REPOSITORY = Path(__file__).resolve().parents[1]


def test_it_is_exported_and_refuses_what_cannot_be_a_crash_check(tmp_path: Path) -> None:
    assert trainparity.check_crashes is check_crashes
    with_resume = CommandCase(
        template=[
            "python",
            "t.py",
            "--ckpt",
            "{checkpoint}",
            "--end",
            "{end_step}",
            "--resume",
            "{resume_from?}",
        ],
        checkpoint="{run_dir}/ck",
        total_step=4,
    )
    refused = check_crashes(with_resume, cwd=tmp_path)
    assert refused.outcome == "ERROR" and "must not take {resume_from?}" in refused.message
    assert refused.usage_error is not None
    plain = CommandCase(
        template=["python", "t.py", "{checkpoint}"], checkpoint="{run_dir}/ck", total_step=4
    )
    for keywords, said in (
        ({"points": ("steps", "kills")}, "points must name"),
        ({"max_points": 0}, "max_points must be"),
        ({"max_lost_steps": -1}, "max_lost_steps must be"),
    ):
        found = check_crashes(plain, cwd=tmp_path, **keywords)
        assert found.outcome == "ERROR" and said in found.message, found.message
    by_spec = check_crashes("trainparity.quickstarts.resume:FaultyCase", cwd=tmp_path)
    assert by_spec.outcome == "ERROR" and "needs a CommandCase" in by_spec.message


def test_a_job_that_records_nothing_is_an_error_that_says_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(
        "import os, sys\nos.makedirs(sys.argv[1], exist_ok=True)\n"
        "open(os.path.join(sys.argv[1], 'state.json'), 'w').write('{}')\n"
    )
    case = CommandCase(
        template=["python", "t.py", "{checkpoint}"], checkpoint="{run_dir}/ck", total_step=4
    )
    result = check_crashes(case, cwd=tmp_path)
    assert result.outcome == "ERROR"
    assert "records nothing" in result.message and "trainparity.record" in result.message


def test_a_job_whose_uninterrupted_runs_differ_abstains(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text(
        textwrap.dedent(
            """
            import os, sys, trainparity
            os.makedirs(sys.argv[1], exist_ok=True)
            for step in range(3):
                trainparity.record(step, {"seed": int.from_bytes(os.urandom(4), "little")})
            """
        )
    )
    case = CommandCase(
        template=["python", "t.py", "{checkpoint}"], checkpoint="{run_dir}/ck", total_step=2
    )
    result = check_crashes(case, cwd=tmp_path, environment={"OMP_NUM_THREADS": "1"})
    assert result.outcome == "ABSTAIN", result.message
    assert "two uninterrupted runs differ at step 0 (seed)" in result.message


def test_the_command_line_names_the_first_breaking_point_and_exits_1(tmp_path: Path) -> None:
    report = tmp_path / "crashes.json"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainparity",
            "crashes",
            "--points",
            "saves",
            "--max-points",
            "2",
            "--total-step",
            "4",
            "--checkpoint",
            "{run_dir}/ckpts",
            "--report",
            str(report),
            "--no-progress",
            "--env",
            "OMP_NUM_THREADS=1",
            "--",
            "python",
            "tests/fixtures/crash_jobs/plain_job.py",
            "--ckpt-dir",
            "{checkpoint}",
            "--total-steps",
            "{end_step}",
            "--save-every",
            "2",
            "--save",
            "direct",
        ],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 1, completed.stderr + completed.stdout
    found = json.loads(report.read_text())
    assert found["outcome"] == "FAIL" and found["first_failing_point"].startswith("save #")
    assert found["points_run"] < found["points_found"]
    text = text_report(found)
    assert "Crash points (" in text and "the restart cannot start" in text
    # Every row names the files its restart opened in the checkpoint location.
    failing = [row for row in found["crash_points"] if row["verdict"] == "FAIL"]
    assert failing and all(row["loaded"] for row in failing)


def test_the_command_line_refuses_a_job_without_its_location() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainparity",
            "crashes",
            "--total-step",
            "4",
            "--",
            "python",
            "t.py",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 4 and "needs --checkpoint" in completed.stderr


NOISY_JOB = """
import os, re, sys, torch, trainparity
directory, total = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0); torch.set_num_threads(1)
os.makedirs(directory, exist_ok=True)
weights, step = torch.randn(64), 0
found = sorted(int(m.group(1)) for f in os.listdir(directory) if (m := re.fullmatch(r"w_(\\d+).pt", f)))
if found:
    saved = torch.load(os.path.join(directory, f"w_{found[-1]}.pt"))
    weights, step = saved["weights"], saved["step"]
trainparity.record(step, {"weights": weights})
while step < total:
    # A real sum whose order comes from os.urandom: its rounding changes from run to run.
    terms = torch.sin(torch.arange(4096, dtype=torch.float32) + step)[:, None] * weights
    order = torch.randperm(4096, generator=torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little")))
    total_grad = torch.zeros(64)
    for index in order.tolist():
        total_grad += terms[index]
    weights = weights - 1e-3 * total_grad
    step += 1
    trainparity.record(step, {"weights": weights})
    path = os.path.join(directory, f"w_{step}.pt")
    torch.save({"weights": weights, "step": step}, path + ".tmp")
    os.replace(path + ".tmp", path)
"""


def test_a_job_that_is_not_bitwise_deterministic_passes_inside_the_noise_envelope(
    tmp_path: Path,
) -> None:
    (tmp_path / "noisy.py").write_text(NOISY_JOB)
    case = CommandCase(
        template=["python", "noisy.py", "{checkpoint}", "{end_step}"],
        checkpoint="{run_dir}/ck",
        total_step=3,
    )
    keywords = {"cwd": tmp_path, "points": ("steps",), "environment": {"OMP_NUM_THREADS": "1"}}
    exact = check_crashes(case, **keywords)
    assert exact.outcome == "ABSTAIN" and "weights" in exact.message
    noise = check_crashes(case, comparison=trainparity.NoiseComparison(), **keywords)
    assert noise.outcome == "PASS", noise.message
    assert [row["point"] for row in noise.crash_points] == [
        "after step 0",
        "after step 1",
        "after step 2",
        "after the end (step 3, every save done)",
    ]
    # record(k) comes before w_k is saved: a crash right after it redoes step k.
    assert [row["steps_redone"] for row in noise.crash_points] == [0, 1, 1, 0]


def test_points_come_in_time_order_and_a_budget_keeps_the_telling_ones() -> None:
    from trainparity._internal.crashes.points import crash_points, spread
    from trainparity._internal.processes.traced_job import FsEvent

    def event(seq: int, when: int, op: str, path: str, length: int = -1) -> FsEvent:
        return FsEvent(seq, when, 1, op, path, None, 0, length, False, False)

    # record(0) at t=5, record(1) at t=50 and again at 51; a save of step 1, then the end.
    events = [
        event(0, 60, "create", "ck/a.tmp"),
        event(1, 61, "write", "ck/a.tmp", 10),
        event(2, 62, "write", "ck/a.tmp", 0),
        event(3, 63, "write", "ck/a.tmp", 5),
        event(4, 64, "fsync", "ck/a.tmp"),
        event(5, 65, "close", "ck/a.tmp"),
        event(6, 66, "rename", "ck/a.tmp"),
    ]
    points = crash_points(("steps", "saves"), events, [(0, 5), (1, 50), (1, 51)])
    assert [point.name.split(" (")[0] for point in points] == [
        "after step 0",
        "after step 1",
        "save #0 create ck/a.tmp",
        "save #1 write ck/a.tmp @0+10",
        "save #2 write ck/a.tmp @0+0",
        "save #3 write ck/a.tmp @0+5",
        "save #4 fsync ck/a.tmp",
        "save #5 close ck/a.tmp",
        "save #6 rename ck/a.tmp",
        "after the end",
    ]
    # A zero-length write, a fsync and a close change no byte: they share the image before.
    assert [point.image_class for point in points] == [0, 0, 0, 1, 2, 2, 3, 3, 3, 4]
    kept = [point.name.split(" (")[0] for point in spread(points, 5)]
    assert kept == [
        "save #1 write ck/a.tmp @0+10",
        "save #3 write ck/a.tmp @0+5",
        "save #4 fsync ck/a.tmp",
        "save #6 rename ck/a.tmp",
        "after the end",
    ]
    assert len(spread(points, 7)) == 7 and spread(points, None) == points


def test_warm_and_fresh_checks_find_the_same_points_images_and_verdicts() -> None:
    """start="warm" forks every run from a server (torch imported once) and traces it there:
    the rows, their disk images and what each restart loaded are the fresh check's."""
    from tests.crash_jobs import crashes, job_case

    case = job_case("plain_job.py", "--save", "direct", total_step=4)
    found = {
        start: crashes(case, points=("steps", "saves"), max_points=4, start=start)
        for start in ("fresh", "warm")
    }
    assert found["fresh"].outcome == found["warm"].outcome == "FAIL", found["warm"].message
    assert found["warm"].crash_points == found["fresh"].crash_points
    assert found["warm"].message == found["fresh"].message
    child_start = found["warm"].environment["child_start"]
    assert "baseline_a-0" in child_start["warm"] and not child_start["fresh"], child_start
