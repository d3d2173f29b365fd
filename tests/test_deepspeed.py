"""DeepSpeed ZeRO on 2 gloo CPU ranks: the example project's checks, and load_deepspeed on real checkpoints.

`trainparity resume -- torchrun ... train.py` runs docs/examples/deepspeed_project/train.py
(ZeRO-2, AdamW, WarmupLR, engine.save_checkpoint/load_checkpoint, record() of the
engine's state after loading and after every step, record_ids): clean (PASS) and
with `load_optimizer_states=False`, `load_lr_scheduler_states=False`,
`load_module_only=True`, a data position that is not saved, the configured
learning rate put back after loading (DeepSpeed#4344's class) and a client
warm-up scheduler DeepSpeed is not given (DeepSpeed#3875), each FAILing at the
step and path where its state was lost; the clean check once more under the
deepspeed launcher (`-- deepspeed ...`). The project's own cases
(parity_case.py) run ZeRO-3 clean and with two of the faults, and its
hf_cases.py the Hugging Face Trainer with a DeepSpeed config (clean PASS, and
the optimizer states not loaded FAIL). One more job saves the training under ZeRO-1,
and one records the initial state on 1 rank.
Everything runs in one module fixture, two commands at a time. DeepSpeed
JIT-builds its shm comm op with g++ on a rank's first `init_distributed`: the
fixture builds it once, into $TORCH_EXTENSIONS_DIR when that is set (CI can
keep it between runs) or else a directory of this test session.
"""

from __future__ import annotations

import functools
import importlib.util
import shutil
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")

from trainparity._internal.recording.reader import read_recordings  # noqa: E402
from trainparity._internal.state.reassembly import global_state  # noqa: E402
from trainparity.checkpoints import load_checkpoint_directory, load_deepspeed  # noqa: E402

from tests.deepspeed_ops import deepspeed_environment  # noqa: E402
from tests.few_at_a_time import differences_by_path, report_of, run_a_few_at_a_time  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent / "docs" / "examples" / "deepspeed_project"
SPLIT_STEP, TOTAL_STEP = 2, 5
FAULTS = (
    "no-optimizer-states",
    "no-lr-scheduler-states",
    "module-only",
    "data-position-not-saved",
    "config-lr-after-load",
    "client-scheduler-not-given",
)
# The project's ZeRO-3 cases (parity_case.py), through the case's own command.
ZERO3_CASES = ("Zero3ResumeCase", "Zero3NoOptimizerStatesCase", "Zero3ConfigLrAfterLoadCase")
# The Hugging Face Trainer with a DeepSpeed config (hf_cases.py, train_hf.py).
TRAINER_CASES = ("TrainerDeepSpeedResumeCase", "TrainerDeepSpeedNoOptimizerStatesCase")
PARAMETERS = ["0.weight", "0.bias", "2.weight", "2.bias"]
# Checks (or stage runs) at once: each check runs its phases side by side already.
CONCURRENT_CHECKS = 2


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("deepspeed")
    project = root / "project"
    shutil.copytree(
        PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", ".trainparity-*")
    )
    environment = deepspeed_environment(tmp_path_factory, root)

    resume = (sys.executable, "-m", "trainparity", "resume", "--json", "--no-progress")
    commands: dict[str, Callable[[], list[str]]] = {}
    for name, fault in {"clean": (), **{f: ("--fault", f) for f in FAULTS}}.items():
        commands[name] = functools.partial(
            list,
            (
                *resume,
                *("--split-step", str(SPLIT_STEP), "--total-step", str(TOTAL_STEP)),
                *("--checkpoint", "{run_dir}/ck", "--work-dir", str(root / name)),
                *("--", "torchrun", "--standalone", "--nproc-per-node=2", "{cwd}/train.py"),
                *("--checkpoint", "{checkpoint}", "--end-step", "{end_step}"),
                *("--resume", "{resume_from?}", *fault),
            ),
        )
    # The deepspeed launcher's ranks meet at its fixed --master_port, which trainparity cannot
    # tell apart per phase: the phases run one after another (--sequential), on a port that
    # was free a moment before the check starts.
    commands["launcher"] = lambda: [
        *resume,
        *("--sequential", "--split-step", str(SPLIT_STEP), "--total-step", str(TOTAL_STEP)),
        *("--checkpoint", "{run_dir}/ck", "--work-dir", str(root / "launcher")),
        *("--", "deepspeed", "--num_gpus", "2", "--master_port", str(_free_port())),
        *("{cwd}/train.py", "--checkpoint", "{checkpoint}", "--end-step", "{end_step}"),
        *("--resume", "{resume_from?}"),
    ]
    for case in ZERO3_CASES:
        commands[case] = functools.partial(
            list, (*resume, f"parity_case:{case}", "--work-dir", str(root / case))
        )
    if importlib.util.find_spec("transformers") is not None:
        for case in TRAINER_CASES:
            commands[case] = functools.partial(
                list, (*resume, f"hf_cases:{case}", "--work-dir", str(root / case))
            )
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone")
    commands["stage1"] = functools.partial(
        list,
        (
            *(*torchrun, "--nproc-per-node=2", "train.py", "--stage", "1"),
            *("--checkpoint", str(root / "stage1"), "--end-step", str(TOTAL_STEP)),
        ),
    )
    # The initial state on 1 rank, recorded: its fragments are whole parameters.
    commands["one_rank"] = functools.partial(
        list,
        (
            *("env", f"TRAINPARITY_RECORD={root / 'one_rank_recording'}"),
            *(*torchrun, "--nproc-per-node=1", "train.py"),
            *("--checkpoint", str(root / "one_rank"), "--end-step", "0"),
        ),
    )
    done: dict = {"root": root}
    done.update(
        run_a_few_at_a_time(commands, cwd=project, env=environment, at_once=CONCURRENT_CHECKS)
    )
    return done


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _failed(runs: dict, name: str) -> dict:
    report = report_of(runs, name)
    assert report["outcome"] == "FAIL" and runs[name][0] == 1, report["message"]
    return report


def _first(report: dict) -> dict[str, dict]:
    """The differences at the first divergent step of the recorded trajectories, by path."""
    return differences_by_path(report)


def _final(report: dict) -> dict[str, dict]:
    """The differences of the final checkpoints (load_deepspeed's paths), by path."""
    return {difference["path"]: difference for difference in report["final_state_differences"]}


def _weights_and_moments() -> set[str]:
    return {
        path
        for name in PARAMETERS
        for path in (
            f'fp32["{name}"]',
            f'module["{name}"]',
            f'optimizer.state["{name}"].exp_avg',
            f'optimizer.state["{name}"].exp_avg_sq',
        )
    }


def _checkpoint(runs: dict) -> Path:
    """The clean check's uninterrupted run's checkpoint: ZeRO-2 on 2 ranks, at TOTAL_STEP."""
    return runs["root"] / "clean" / "baseline_a" / "ck"


def _zero3_checkpoint(runs: dict) -> Path:
    return runs["root"] / "Zero3ResumeCase" / "baseline_a" / "checkpoint"


@pytest.mark.parametrize("name", ["clean", "Zero3ResumeCase"])
def test_a_clean_zero2_or_zero3_resume_passes_step_by_step(runs, name):
    report = report_of(runs, name)
    assert report["outcome"] == "PASS", report["message"]
    assert runs[name][0] == 0
    assert report["message"] == f"final states are exactly equivalent at step {TOTAL_STEP}"
    # Every step's engine state was recorded and compared, rank by rank.
    every_step = list(range(TOTAL_STEP + 1))
    assert report["trajectory"]["recorded_steps"]["baseline_a"] == {
        "rank0": every_step,
        "rank1": every_step,
    }
    # Both ranks ran in every phase, under torchrun.
    for process in report["processes"]:
        assert [rank["rank"] for rank in process["ranks"]] == [0, 1], process


def test_a_clean_resume_under_the_deepspeed_launcher_passes(runs):
    report = report_of(runs, "launcher")
    assert report["outcome"] == "PASS", report["message"]
    assert report["message"] == f"final states are exactly equivalent at step {TOTAL_STEP}"
    assert report["case"].startswith("deepspeed --num_gpus 2 --master_port ")


@pytest.mark.parametrize("name", ["no-optimizer-states", "Zero3NoOptimizerStatesCase"])
def test_loading_without_optimizer_states_fails_right_after_loading(runs, name):
    report = _failed(runs, name)
    # Right after load_checkpoint: AdamW holds no moments, and the learning rate is the one
    # WarmupLR had set before its first step (0), not the restored one.
    assert report["first_divergent_step"] == SPLIT_STEP
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP}: rank0.optimizer.param_groups[0].lr"
    )
    first = _first(report)
    assert float(first["rank0.optimizer.param_groups[0].lr"]["candidate"]) == 0.0
    moments = first['rank0.optimizer.state["0.weight"].exp_avg']
    assert moments["reason"] == "missing_candidate"
    assert "zero_fragment mesh 2" in moments["baseline"]
    # At the end, the moments restarted from zero and AdamW counted its steps from the split.
    step = _final(report)['optimizer.state["0.weight"].step']
    assert "values=[5.0]" in step["baseline"] and "values=[3.0]" in step["candidate"]
    assert "lr_scheduler.last_batch_iteration" not in _final(report)


def test_loading_without_lr_scheduler_states_fails_at_the_scheduler_after_loading(runs):
    report = _failed(runs, "no-lr-scheduler-states")
    assert report["first_divergent_step"] == SPLIT_STEP
    first = _first(report)
    # WarmupLR starts its warm-up again.
    position = first["rank0.lr_scheduler.last_batch_iteration"]
    assert (position["baseline"], position["candidate"]) == (str(SPLIT_STEP - 1), "-1")
    # The optimizer's own state was restored: its moments agree at that step.
    assert not [path for path in first if "optimizer.state" in path]
    position = _final(report)["lr_scheduler.last_batch_iteration"]
    assert (position["baseline"], position["candidate"]) == (
        str(TOTAL_STEP - 1),
        str(TOTAL_STEP - SPLIT_STEP - 1),
    )


def test_loading_the_module_only_fails_at_the_engine_counters_after_loading(runs):
    report = _failed(runs, "module-only")
    assert report["first_divergent_step"] == SPLIT_STEP
    first = _first(report)
    # DeepSpeed's own step counter restarts with the optimizer and the scheduler.
    steps = first["rank0.global_steps"]
    assert (steps["baseline"], steps["candidate"]) == (str(SPLIT_STEP), "0")
    assert {"rank0.global_samples", "rank0.lr_scheduler.last_batch_iteration"} <= set(first)
    steps = _final(report)["global_steps"]
    assert (steps["baseline"], steps["candidate"]) == (
        str(TOTAL_STEP),
        str(TOTAL_STEP - SPLIT_STEP),
    )


def test_a_data_position_not_saved_fails_at_the_first_step_on_repeated_samples(runs):
    report = _failed(runs, "data-position-not-saved")
    # The checkpoint was whole: the state after loading agrees; the first step after it
    # trains on samples of epoch 0 again, and the weights it moves differ.
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP + 1}: coverage.epoch0.rank0"
    )
    first = _first(report)
    assert first["coverage.epoch0.rank1"]["reason"] == "sample_repeated"
    assert 'rank0.fp32["0.weight"]' in first
    assert not {"rank0.global_steps", "rank0.lr_scheduler.last_batch_iteration"} & set(first)
    coverage = [path for path in _final(report) if path.startswith("coverage.epoch0.rank")]
    assert coverage, sorted(_final(report))


@pytest.mark.parametrize("name", ["config-lr-after-load", "Zero3ConfigLrAfterLoadCase"])
def test_the_configured_lr_put_back_after_loading_fails_at_the_learning_rate(runs, name):
    report = _failed(runs, name)
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP}: rank0.optimizer.param_groups[0].lr"
    )
    assert set(_first(report)) == {"rank0.optimizer.param_groups[0].lr"}
    assert float(_first(report)["rank0.optimizer.param_groups[0].lr"]["candidate"]) == 0.05
    # The restored WarmupLR set its own rate again at its next step: at the end, only the
    # weights and moments that the step after the split moved differ (ZeRO-3 saves no module
    # weights of its own: placeholders, equal).
    expected = _weights_and_moments()
    if name.startswith("Zero3"):
        expected = {path for path in expected if not path.startswith("module")}
    assert set(_final(report)) == expected


def test_a_client_scheduler_deepspeed_is_not_given_fails_at_the_first_step_after_loading(runs):
    report = _failed(runs, "client-scheduler-not-given")
    # load_checkpoint restored the optimizer's learning rate; the warm-up's next step
    # counts from zero: 6-step linear warm-up, 0.05 * 4/6 without a resume, 0.05 * 2/6 after.
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP + 1}: rank0.optimizer.param_groups[0].lr"
    )
    lr = _first(report)["rank0.optimizer.param_groups[0].lr"]
    assert (float(lr["baseline"]), float(lr["candidate"])) == pytest.approx(
        (0.05 * 4 / 6, 0.05 * 2 / 6)
    )
    assert set(_final(report)) == {"optimizer.param_groups[0].lr", *_weights_and_moments()}


def _trainer_report(runs: dict, name: str) -> dict:
    if name not in runs:
        pytest.skip("the Hugging Face Trainer cases need transformers")
    return report_of(runs, name)


def test_the_trainer_resuming_without_optimizer_states_fails_right_after_loading(runs):
    report = _trainer_report(runs, "TrainerDeepSpeedNoOptimizerStatesCase")
    assert report["outcome"] == "FAIL", report["message"]
    assert report["first_divergent_step"] == SPLIT_STEP
    first = _first(report)
    # WarmupDecayLR has not stepped in the fresh optimizer: its rate is 0, not the restored one.
    assert "rank0.optimizer.param_groups[0].lr" in first
    moments = first['rank0.optimizer.state["transformer.wte.weight"].exp_avg']
    assert moments["reason"] == "missing_candidate"
    assert "zero_fragment mesh 2" in moments["baseline"]
    # The Trainer's observer reads the engine's checkpoint inside its own.
    assert 'deepspeed.optimizer.state["transformer.wte.weight"].step' in _final(report)


def test_a_clean_trainer_resume_under_deepspeed_passes_step_by_step(runs):
    report = _trainer_report(runs, "TrainerDeepSpeedResumeCase")
    assert report["outcome"] == "PASS", report["message"]
    assert report["message"] == "final states are exactly equivalent at step 4"
    assert report["trajectory"]["recorded_steps"]["candidate_resume"] == {
        "rank0": [2, 3, 4],
        "rank1": [2, 3, 4],
    }


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


def test_two_ranks_fragments_compare_on_names_with_one_rank_whole_parameters(runs):
    returncode, _stdout, stderr = runs["one_rank"]
    assert returncode == 0, stderr[-3000:]
    one = read_recordings(runs["root"] / "one_rank_recording")
    two = read_recordings(runs["root"] / "clean" / "recordings" / "baseline_a")
    initial_one = global_state([one[0].steps[0].state]).as_dict()
    initial_two = global_state([two[rank].steps[0].state for rank in (0, 1)]).as_dict()
    assert one[0].steps[0].state.as_dict()["fp32"].as_dict()["0.weight"].shape == (32,)
    for name in PARAMETERS:
        assert torch.equal(
            initial_one["fp32"].as_dict()[name].to_tensor(),
            initial_two["fp32"].as_dict()[name].to_tensor(),
        ), name


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


@pytest.mark.parametrize("stage", [1, 3])
def test_zero1_and_zero3_checkpoints_read_as_the_same_training(runs, stage):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    if stage == 1:
        returncode, _stdout, stderr = runs["stage1"]
        assert returncode == 0, stderr[-3000:]
    directory = runs["root"] / "stage1" if stage == 1 else _zero3_checkpoint(runs)
    state, zero2 = load_deepspeed(directory), load_deepspeed(_checkpoint(runs))
    theirs = get_fp32_state_dict_from_zero_checkpoint(str(directory))
    assert state["zero"]["stage"] == stage
    for name in PARAMETERS:
        assert torch.equal(state["fp32"][name], theirs[name]), name
        # The same seeds and data under another stage: equal up to reduction order.
        torch.testing.assert_close(state["fp32"][name], zero2["fp32"][name])
        for key, value in zero2["optimizer"]["state"][name].items():
            torch.testing.assert_close(state["optimizer"]["state"][name][key], value)


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
