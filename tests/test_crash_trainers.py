"""The crash check on real trainers as shipped (issue 51, deliverable 6): findings, not tuning.

Each job in tests/fixtures/crash_jobs/ uses its library's own save and
auto-resume exactly as the library documents them (the README there says
how); the versions are the ones .ci/integrations-constraints.txt pins. A
FAIL here is a true finding about the trainer, named with its crash point in
docs/crashes.md ("Real trainers"); a test asserts what the check finds, so a
library release that changes it shows up. Each check runs 2 steps with one
save (the last), crashed at a few points inside it (its first and last write,
its renames and fsyncs).
"""

from __future__ import annotations

import pytest
from trainparity._internal.processes.traced_job import tracing_available

from tests.crash_jobs import crashes, job_case
from tests.deepspeed_ops import DEEPSPEED_PRELOADS

pytestmark = pytest.mark.skipif(not tracing_available(), reason="needs Linux x86-64/AArch64")


def _check(job: str, points: tuple[str, ...] = ("saves",), max_points: int = 3, **environment: str):
    case = job_case(f"{job}_job.py", total_step=2)
    return crashes(case, points=points, max_points=max_points, environment=environment)


def _first_failing(result):
    return next(row for row in result.crash_points if row["verdict"] == "FAIL")


@pytest.mark.warm_preload("transformers.trainer")
def test_the_hugging_face_trainer_resumes_from_a_checkpoint_it_had_not_finished() -> None:
    pytest.importorskip("transformers")
    result = _check("hf_trainer")
    assert result.outcome == "FAIL", result.message
    first = _first_failing(result)
    assert "checkpoint-2" in first["point"] and "the restart cannot start" in first["detail"]


@pytest.mark.warm_preload("transformers.trainer")
def test_a_finished_hugging_face_job_restarted_trains_past_its_last_step() -> None:
    """Killed after its last save, before it exits (or simply run again), the Trainer loads
    checkpoint-2 and trains a step more than max_steps."""
    pytest.importorskip("transformers")
    result = _check("hf_trainer", points=("steps",), max_points=1)  # the end alone
    assert result.outcome == "FAIL", result.message
    end = result.crash_points[-1]
    assert end["kind"] == "end" and end["verdict"] == "FAIL"
    assert "went on to step 3, past the uninterrupted run's last step 2" in end["detail"]


def test_accelerate_loads_the_newest_state_folder_even_when_it_is_partial() -> None:
    pytest.importorskip("accelerate")
    result = _check("accelerate")
    assert result.outcome == "FAIL", result.message
    first = _first_failing(result)
    assert "checkpoint_" in first["point"] and "the restart cannot start" in first["detail"]


@pytest.fixture(scope="module")
def deepspeed_ops(tmp_path_factory) -> dict[str, str]:
    """DeepSpeed's shm op, built once for the session (tests/deepspeed_ops.py): its first
    build takes most of a minute, which is no part of a crash check."""
    pytest.importorskip("deepspeed")
    from tests.deepspeed_ops import deepspeed_environment

    environment = deepspeed_environment(tmp_path_factory, tmp_path_factory.mktemp("ds"))
    # PATH too: torch builds the op with the first `ninja` on it, and two ninjas (pip's in the
    # venv, the system's) cannot read each other's build log, so each rebuilds the op.
    return {key: environment[key] for key in ("DS_ACCELERATOR", "TORCH_EXTENSIONS_DIR", "PATH")}


@pytest.mark.warm_preload(*DEEPSPEED_PRELOADS)
def test_deepspeed_trusts_a_latest_file_it_writes_in_place(deepspeed_ops: dict[str, str]) -> None:
    result = _check("deepspeed", **deepspeed_ops)
    assert result.outcome == "FAIL", result.message
    first = _first_failing(result)
    assert "latest" in first["point"] and "the restart cannot start" in first["detail"]


@pytest.mark.warm_preload("lightning")
def test_lightning_moves_each_checkpoint_into_place_and_restarts_cleanly() -> None:
    pytest.importorskip("lightning")
    result = _check("lightning")
    assert result.outcome == "PASS", result.message
