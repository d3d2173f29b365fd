"""The crash check's fault table (issue 51): real torch.save, DCP and files, real SIGKILLs.

Each row is tests/fixtures/crash_jobs/plain_job.py with one `--save` mode: a
way users really save and auto-resume, each faulty one beside its clean
counterpart. The job runs 4 steps and saves every 2; `max_points` keeps each
check to a few crash points (each save's first and last write, its renames
and fsyncs are always among them), so a row costs about 20 runs of a tiny
job. The real trainers' rows are in test_crash_trainers.py.
"""

from __future__ import annotations

import re

import pytest
from trainparity._internal.processes.traced_job import tracing_available

from tests.crash_jobs import crashes, job_case, stderr_tails

pytestmark = pytest.mark.skipif(not tracing_available(), reason="needs Linux x86-64/AArch64")

# Each faulty mode, and what the first failing row says.
SAID = {
    "direct": "the restart cannot start",
    "latest_first": "No such file or directory",
    "dir_no_marker": "the restart cannot start",
    "dcp_no_metadata": "the restart cannot start",
    "dcp_async_unawaited": "the restart",
}


def _check(mode: str, *, power_loss: bool = False, max_points: int = 8, points=("steps", "saves")):
    extra = ("--accum", "3") if mode.startswith("accum") else ()
    case = job_case("plain_job.py", "--save", mode, *extra, total_step=4)
    return crashes(case, points=points, power_loss=power_loss, max_points=max_points)


@pytest.mark.parametrize("mode", sorted(SAID))
def test_a_save_that_a_crash_tears_fails_at_its_first_breaking_point(mode: str) -> None:
    said = SAID[mode]
    result = _check(mode, points=("saves",), max_points=4)
    assert result.outcome == "FAIL", result.message
    failing = [row for row in result.crash_points if row["verdict"] == "FAIL"]
    first = failing[0]
    assert result.first_failing_point == first["point"]
    assert first["kind"] == "save" and said in first["detail"]
    assert result.message.startswith(f"crash point {first['point']}")
    # The rows before the first failing one restarted cleanly, in time order.
    before = result.crash_points[: result.crash_points.index(first)]
    assert all(row["verdict"] == "PASS" for row in before)


# `replace` and `durable`, the clean counterparts of `direct`, are checked with their process
# crash points by the power-loss tests below (every process row PASSes there).
@pytest.mark.parametrize("mode", ["latest_after", "dir_marker", "dcp_checked", "dcp_async_awaited"])
def test_its_clean_counterpart_passes_at_every_point(mode: str) -> None:
    result = _check(mode, max_points=6)
    assert result.outcome == "PASS", result.message
    rows = result.crash_points
    assert rows and all(row["verdict"] == "PASS" for row in rows)
    # Both saves (of steps 2 and 4) were crashed inside, at their kept points at least (an
    # async save writes later: its calls come after a later step's record).
    paths = " ".join(row["path"] for row in rows if row["kind"] == "save")
    assert "step_2" in paths and "step_4" in paths
    assert result.restarts == result.distinct_images <= result.crash_runs
    # Progress lost is at most a save's interval, or two for an async save, which completes
    # only when the next save awaits it.
    limit = 4 if mode.startswith("dcp_async") else 2
    assert result.max_steps_redone is not None and result.max_steps_redone <= limit


def test_a_checkpoint_saved_inside_an_accumulation_window_fails_and_its_fix_passes() -> None:
    broken = _check("accum_midwindow", points=("steps",), max_points=4)
    assert broken.outcome == "FAIL", broken.message
    assert "differs" in broken.message or "ended at step" in broken.message
    fixed = _check("accum_boundary", points=("steps",), max_points=4)
    assert fixed.outcome == "PASS", fixed.message


def test_power_loss_breaks_a_rename_without_fsync() -> None:
    careless = _check("replace", power_loss=True, max_points=6, points=("saves",))
    assert careless.outcome == "FAIL", careless.message
    first = next(row for row in careless.crash_points if row["verdict"] == "FAIL")
    assert first["loss"] == "data" and "power loss (data)" in careless.message
    # The same points without power loss restart cleanly (the clean counterpart of `direct`).
    assert all(
        row["verdict"] == "PASS" for row in careless.crash_points if row["loss"] == "process"
    )


def test_power_loss_spares_a_save_that_fsyncs_the_file_and_its_directory() -> None:
    durable = _check("durable", power_loss=True, max_points=6, points=("saves",))
    assert durable.outcome == "PASS", durable.message  # process crash rows included
    assert {row["loss"] for row in durable.crash_points} == {"process", "data", "names"}


@pytest.mark.parametrize(("mode", "outcome"), [("direct", "FAIL"), ("replace", "PASS")])
def test_under_torchrun_one_rank_dies_and_the_restart_relaunches_the_job(
    mode: str, outcome: str, tmp_path
) -> None:
    """tests/fixtures/crash_jobs/ddp_job.py on 2 gloo ranks: rank 0 saves; the kill hits the rank
    that makes the call, torchrun stops the other, and the restart is the whole torchrun command.

    Warm, as the suite runs checks: the agent forked from its server and the ranks from the
    agent's zygote, traced from the agent's fork on. The torn save is also checked fresh (each
    run a new torchrun, traced from its exec): the same points, disk images, files loaded and
    verdicts, where only which rank fails first on the torn file may differ."""
    case = job_case(
        "ddp_job.py", "--save", mode, total_step=2, launcher=("torchrun", "--nproc-per-node", "2")
    )
    starts = ("warm", "fresh") if outcome == "FAIL" else ("warm",)
    found = {
        start: crashes(
            case, points=("saves",), max_points=2, start=start, work_dir=tmp_path / start
        )
        for start in starts
    }
    for start, result in found.items():
        assert result.outcome == outcome, f"{result.message}\n{stderr_tails(tmp_path / start)}"
        # A warm check forked every run (a fresh one reports no child_start).
        child_start = result.environment.get("child_start")
        assert (child_start is None) if start == "fresh" else not child_start["fresh"], child_start
    if outcome == "FAIL":
        # The failing rank is named (either may fail first on the torn file), not torchrun's
        # own ChildFailedError.
        for result in found.values():
            assert re.search(
                r"rank [01] exited with code 1; its last stderr line: \w+", result.message
            )
        warm, fresh = (_either_rank(found[start].crash_points) for start in ("warm", "fresh"))
        assert warm == fresh


def _either_rank(rows: list[dict]) -> list[dict]:
    """Crash rows with the rank a detail names made anonymous: either rank may fail first."""
    return [
        {**row, "detail": re.sub(r"\brank [01]\b", "rank N", row.get("detail") or "")}
        for row in rows
    ]
