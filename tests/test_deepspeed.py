"""DeepSpeed ZeRO-2 on 2 gloo CPU ranks: the example project's clean check and five faults, and load_deepspeed.

`trainparity resume -- torchrun ... train.py` runs docs/examples/deepspeed_project/train.py
(ZeRO-2, AdamW, WarmupLR, engine.save_checkpoint/load_checkpoint, record() of the
engine's state after loading and after every step, record_ids): clean (PASS) and
with `load_optimizer_states=False`, `load_lr_scheduler_states=False`,
`load_module_only=True`, a data position that is not saved and the configured
learning rate put back after loading (DeepSpeed#4344's class), each FAILing at the
step and path where its state was lost. Those five faults act only when the script
loads (the data position too: it starts from 0 anyway without a resume), so their
uninterrupted runs and their run to the split step are the clean check's: each is
planned (`--plan-only`), runs only its resumed phase on the clean check's other
phases, and is judged by `trainparity judge --run-missing`, which runs that phase
(tests/shared_baselines.py). The clean run's checkpoint and recordings are then read
by load_deepspeed and reassembled. The other DeepSpeed modules: test_deepspeed_zero3.py (the project's
ZeRO-3 cases), test_deepspeed_stages.py (ZeRO-1 and ZeRO-3 checkpoints, 1 rank
against 2), test_deepspeed_launcher.py (the deepspeed launcher, a client
scheduler DeepSpeed is not given) and test_deepspeed_trainer.py (the Hugging Face
Trainer). DeepSpeed JIT-builds its shm comm op with g++ on a rank's first
`init_distributed`: the `prepared` fixture builds it once, into
$TORCH_EXTENSIONS_DIR when that is set (CI can keep it between runs) or else a
directory of this test session (tests/deepspeed_ops.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")

from trainparity._internal.recording.reader import read_recordings  # noqa: E402
from trainparity._internal.state.reassembly import global_state  # noqa: E402
from trainparity.checkpoints import load_checkpoint_directory, load_deepspeed  # noqa: E402

from tests.deepspeed_ops import DEEPSPEED_PRELOADS  # noqa: E402
from tests.deepspeed_project import (  # noqa: E402
    CONCURRENT_CHECKS,
    PARAMETERS,
    SPLIT_STEP,
    TOTAL_STEP,
    assert_a_clean_resume_passed_step_by_step,
    assert_no_optimizer_states_failed_right_after_loading,
    assert_the_configured_lr_put_back_failed_at_the_learning_rate,
    differences_at_first_step,
    failed,
    final_differences,
    prepared,
    template_check,
)
from tests.few_at_a_time import report_of, run_a_few_at_a_time  # noqa: E402
from tests.shared_baselines import judge_here, shared_baseline_checks  # noqa: E402

pytestmark = pytest.mark.warm_preload(*DEEPSPEED_PRELOADS)

# Each acts only on the resumed path of train.py: the clean check's other phases serve it.
FAULTS = (
    "no-optimizer-states",
    "no-lr-scheduler-states",
    "module-only",
    "data-position-not-saved",
    "config-lr-after-load",
)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    return prepared(tmp_path_factory, "deepspeed")


@pytest.fixture(scope="module")
def runs(project) -> dict:
    root, cwd, environment = project
    faults = {fault: template_check(("--fault", fault)) for fault in FAULTS}
    commands, after = shared_baseline_checks("clean", template_check(), faults, root)
    done: dict = {"root": root}
    done.update(
        run_a_few_at_a_time(
            commands, cwd=cwd, env=environment, at_once=CONCURRENT_CHECKS, after=after, here=True
        )
    )
    done.update(judge_here("clean", faults, root, environment))
    return done


def _checkpoint(runs: dict) -> Path:
    """The clean check's uninterrupted run's checkpoint: ZeRO-2 on 2 ranks, at TOTAL_STEP."""
    return runs["root"] / "clean" / "baseline_a" / "ck"


def test_a_clean_zero2_resume_passes_step_by_step(runs):
    assert_a_clean_resume_passed_step_by_step(runs, "clean")


def test_a_fault_check_runs_only_its_resumed_phase_on_the_clean_baselines(runs):
    # Its other phases are the clean check's own processes; its resumed phase ran apart.
    report = failed(runs, "module-only")
    rows = {row["phase"]: row for row in report["processes"]}
    clean = {row["phase"]: row for row in report_of(runs, "clean")["processes"]}
    for phase in ("baseline_a", "baseline_b", "candidate_split"):
        assert rows[phase]["pid"] == clean[phase]["pid"], phase
    assert rows["candidate_resume"]["pid"] != clean["candidate_resume"]["pid"]
    assert rows["candidate_resume"]["returncode"] == 0


def test_loading_without_optimizer_states_fails_right_after_loading(runs):
    assert_no_optimizer_states_failed_right_after_loading(runs, "no-optimizer-states")


def test_loading_without_lr_scheduler_states_fails_at_the_scheduler_after_loading(runs):
    report = failed(runs, "no-lr-scheduler-states")
    assert report["first_divergent_step"] == SPLIT_STEP
    first = differences_at_first_step(report)
    # WarmupLR starts its warm-up again.
    position = first["rank0.lr_scheduler.last_batch_iteration"]
    assert (position["baseline"], position["candidate"]) == (str(SPLIT_STEP - 1), "-1")
    # The optimizer's own state was restored: its moments agree at that step.
    assert not [path for path in first if "optimizer.state" in path]
    position = final_differences(report)["lr_scheduler.last_batch_iteration"]
    assert (position["baseline"], position["candidate"]) == (
        str(TOTAL_STEP - 1),
        str(TOTAL_STEP - SPLIT_STEP - 1),
    )


def test_loading_the_module_only_fails_at_the_engine_counters_after_loading(runs):
    report = failed(runs, "module-only")
    assert report["first_divergent_step"] == SPLIT_STEP
    first = differences_at_first_step(report)
    # DeepSpeed's own step counter restarts with the optimizer and the scheduler.
    steps = first["rank0.global_steps"]
    assert (steps["baseline"], steps["candidate"]) == (str(SPLIT_STEP), "0")
    assert {"rank0.global_samples", "rank0.lr_scheduler.last_batch_iteration"} <= set(first)
    steps = final_differences(report)["global_steps"]
    assert (steps["baseline"], steps["candidate"]) == (
        str(TOTAL_STEP),
        str(TOTAL_STEP - SPLIT_STEP),
    )


def test_a_data_position_not_saved_fails_at_the_first_step_on_repeated_samples(runs):
    report = failed(runs, "data-position-not-saved")
    # The checkpoint was whole: the state after loading agrees; the first step after it
    # trains on samples of epoch 0 again, and the weights it moves differ.
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP + 1}: coverage.epoch0.rank0"
    )
    first = differences_at_first_step(report)
    assert first["coverage.epoch0.rank1"]["reason"] == "sample_repeated"
    assert 'rank0.fp32["0.weight"]' in first
    assert not {"rank0.global_steps", "rank0.lr_scheduler.last_batch_iteration"} & set(first)
    coverage = [
        path for path in final_differences(report) if path.startswith("coverage.epoch0.rank")
    ]
    assert coverage, sorted(final_differences(report))


def test_the_configured_lr_put_back_after_loading_fails_at_the_learning_rate(runs):
    assert_the_configured_lr_put_back_failed_at_the_learning_rate(
        runs, "config-lr-after-load", zero3=False
    )


def test_each_rank_recorded_its_fragments_which_reassemble_to_the_checkpoint(runs):
    recordings = read_recordings(runs["root"] / "clean" / "recordings" / "baseline_a")
    assert sorted(recordings) == [0, 1]
    final = [recordings[rank].steps[-1] for rank in (0, 1)]
    assert {record.step for record in final} == {TOTAL_STEP}
    fragments = [record.state.as_dict()["fp32"].as_dict()["0.weight"] for record in final]
    # ZeRO-2 splits the flat group [0.weight, 0.bias, 2.weight, 2.bias] (49 elements) in two.
    assert [fragment.placement.offsets for fragment in fragments] == [(0,), (26,)]
    assert [fragment.shape for fragment in fragments] == [(26,), (6,)]
    assert fragments[0].placement.kind == "zero_fragment"
    whole = global_state([record.state for record in final]).as_dict()
    saved = load_deepspeed(_checkpoint(runs))
    for name in PARAMETERS:
        flat = saved["fp32"][name].flatten()
        assert torch.equal(whole["fp32"].as_dict()[name].to_tensor(), flat), name
        moments = whole["optimizer"].as_dict()["state"].as_dict()[name].as_dict()
        assert torch.equal(
            moments["exp_avg"].to_tensor(), saved["optimizer"]["state"][name]["exp_avg"].flatten()
        )


def test_load_deepspeed_reassembles_names_as_deepspeed_does(runs):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    state = load_deepspeed(_checkpoint(runs))
    theirs = get_fp32_state_dict_from_zero_checkpoint(str(_checkpoint(runs)))
    assert list(state["fp32"]) == list(theirs) == PARAMETERS
    for name in PARAMETERS:
        assert torch.equal(state["fp32"][name], theirs[name]), name
        # fp32 training: the module's weights are the master weights.
        assert torch.equal(state["module"][name], theirs[name]), name
        moments = state["optimizer"]["state"][name]
        assert sorted(moments) == ["exp_avg", "exp_avg_sq", "step"]
        assert moments["exp_avg"].shape == theirs[name].shape
        assert moments["step"].item() == TOTAL_STEP
    assert state["optimizer"]["param_groups"][0]["params"] == PARAMETERS
    assert state["optimizer"]["param_groups"][0]["weight_decay"] == 0.01
    assert state["lr_scheduler"] == {"last_batch_iteration": TOTAL_STEP - 1}
    assert state["client_state"] == {"step": TOTAL_STEP}
    assert (state["global_steps"], state["skipped_steps"]) == (TOTAL_STEP, 0)
    assert state["zero"]["stage"] == 2 and state["zero"]["partition_count"] == 2
    # The default observer's dispatch reads the same.
    assert torch.equal(
        load_checkpoint_directory(_checkpoint(runs))["fp32"]["2.bias"], theirs["2.bias"]
    )


def test_each_rank_partition_is_its_slice_of_the_reassembled_state(runs):
    whole = load_deepspeed(_checkpoint(runs))
    flat = {
        key: torch.cat([whole["optimizer"]["state"][name][key].flatten() for name in PARAMETERS])
        for key in ("exp_avg", "exp_avg_sq")
    }
    flat["fp32"] = torch.cat([whole["fp32"][name].flatten() for name in PARAMETERS])
    covered = 0
    for rank in (0, 1):
        part = load_deepspeed(_checkpoint(runs), rank=rank)
        (group,) = part["partition"]["groups"]
        assert part["partition"]["rank"] == rank and group["offset"] == covered
        window = slice(group["offset"], group["offset"] + group["numel"])
        assert torch.equal(part["fp32"][0], flat["fp32"][window])
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(part["optimizer"]["state"][0][key], flat[key][window]), key
        covered += group["numel"]
    assert covered == flat["fp32"].numel()
    with pytest.raises(ValueError, match="rank=2 is not a rank of this 2-rank checkpoint"):
        load_deepspeed(_checkpoint(runs), rank=2)


def test_an_explicit_tag_or_the_tag_directory_reads_the_same(runs):
    latest = load_deepspeed(_checkpoint(runs))
    for state in (
        load_deepspeed(_checkpoint(runs), tag=f"global_step{TOTAL_STEP}"),
        load_deepspeed(_checkpoint(runs) / f"global_step{TOTAL_STEP}"),
    ):
        assert state["global_steps"] == TOTAL_STEP
        assert all(torch.equal(state["fp32"][n], latest["fp32"][n]) for n in PARAMETERS)


def test_a_partial_or_damaged_directory_names_what_is_missing(runs, tmp_path):
    copy = tmp_path / "ck"
    shutil.copytree(_checkpoint(runs), copy)
    tag = copy / f"global_step{TOTAL_STEP}"
    (tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    with pytest.raises(
        FileNotFoundError,
        match=r"rank 1's file zero_pp_rank_1_mp_rank_00_optim_states\.pt is missing",
    ):
        load_deepspeed(copy)
    with pytest.raises(FileNotFoundError, match=r"tag directory .*global_step9.* is missing"):
        load_deepspeed(copy, tag="global_step9")
    (copy / "latest").unlink()
    shutil.rmtree(tag)
    with pytest.raises(FileNotFoundError, match=r"latest' is missing"):
        load_deepspeed(copy)
