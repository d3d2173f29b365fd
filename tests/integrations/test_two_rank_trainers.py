"""check_resume on the HF Trainer and on Lightning under DDP: two gloo ranks started by torchrun, CPU.

Each check runs 4 phases of 2 ranks; the cases are the smallest that split
mid-epoch (split at step 2 of 4) to keep the module within about a minute and
a half on two cores.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from trainparity import Outcome, check_resume
from trainparity._internal.cases.phase_plan import plan_environment

from tests.integrations.conftest import CHILD_ENVIRONMENT

pytestmark = pytest.mark.warm_preload("transformers.trainer")

EVERY_PHASE = ("baseline_a", "baseline_b", "candidate_split", "candidate_resume")


def _resume(project, case, work_dir):
    return check_resume(case, cwd=project, environment=CHILD_ENVIRONMENT, work_dir=work_dir)


def _ranks_recorded_per_phase(result):
    return {phase: sorted(ranks) for phase, ranks in result.trajectory["recorded_steps"].items()}


def test_two_rank_hf_trainer_resume_passes(project, tmp_path):
    pytest.importorskip("transformers")
    result = _resume(project, "hf_cases:TrainerResumeTwoRanks", tmp_path)
    assert result.outcome == Outcome.PASS, result.message
    # Both ranks recorded every phase, and every published checkpoint holds both RNG files
    # (rank 0 moves checkpoint-<N> only after rank 1 wrote rng_state_1.pth into it).
    assert _ranks_recorded_per_phase(result) == dict.fromkeys(EVERY_PHASE, ["rank0", "rank1"])
    for phase in EVERY_PHASE:
        checkpoint = tmp_path / phase / "checkpoint"
        assert {path.name for path in checkpoint.glob("rng_state*")} == {
            "rng_state_0.pth",
            "rng_state_1.pth",
        }, phase


def test_rank_zero_publishes_the_checkpoint_only_after_every_rank_wrote_to_it(
    tmp_path, monkeypatch
):
    pytest.importorskip("transformers")
    from trainparity._internal.integrations import huggingface

    output = tmp_path / "trainer_output"
    (output / "checkpoint-2").mkdir(parents=True)
    (output / "checkpoint-2" / "rng_state_0.pth").write_bytes(b"rank 0")
    plan = plan_environment(
        phase="candidate_split", end_step=2, checkpoint=tmp_path / "checkpoint", run_dir=tmp_path
    )
    for name, value in plan.items():
        monkeypatch.setenv(name, value)

    def rank_one_writes_while_rank_zero_waits():
        # A barrier returns once every rank reached it; rank 1 was still saving until then.
        rank_one_file = output / "checkpoint-2" / "rng_state_1.pth"
        if not (tmp_path / "checkpoint").exists():
            rank_one_file.write_bytes(b"rank 1")

    monkeypatch.setattr(huggingface, "_barrier", rank_one_writes_while_rank_zero_waits)
    callback = huggingface.TrainParityCallback()
    callback.on_save(
        SimpleNamespace(output_dir=str(output)),
        SimpleNamespace(global_step=2, is_world_process_zero=True),
        SimpleNamespace(),
    )
    assert sorted(path.name for path in (tmp_path / "checkpoint").iterdir()) == [
        "rng_state_0.pth",
        "rng_state_1.pth",
    ]


def test_rank_one_resuming_without_its_rng_file_fails(project, tmp_path):
    pytest.importorskip("transformers")
    result = _resume(project, "hf_cases:TrainerLosingRankOneRNG", tmp_path)
    assert result.outcome == Outcome.FAIL, result.message
    # DDP averages the gradients: both ranks' models part at step 3, the first after the
    # split, and the report names rank 0 on that tie.
    assert result.first_divergent_step == 3
    assert result.primary_difference.path.startswith("rank0.model[")
    # The final state says whose random state was lost: rank 1's, and only its torch stream.
    rng_paths = {d.path for d in result.final_state_differences if d.path.startswith("rng.")}
    assert rng_paths == {"rng.rng_state_1.cpu"}


def test_two_rank_lightning_ddp_resume_passes(project, tmp_path):
    pytest.importorskip("lightning")
    result = _resume(project, "lightning_cases:LightningResumeTwoRanks", tmp_path)
    assert result.outcome == Outcome.PASS, result.message
    assert _ranks_recorded_per_phase(result) == dict.fromkeys(EVERY_PHASE, ["rank0", "rank1"])
