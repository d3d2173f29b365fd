"""DeepSpeed ZeRO on 2 gloo CPU ranks: load_deepspeed on real checkpoints, and resume checks.

`trainparity resume -- torchrun ... train.py` runs tests/fixtures/deepspeed_zero_train.py
(ZeRO-2, AdamW, WarmupLR, engine.save_checkpoint/load_checkpoint, record_ids) seven
times at once: clean (PASS) and with `load_optimizer_states=False`,
`load_lr_scheduler_states=False`, `load_module_only=True`, a data position that
is not saved, the configured learning rate put back after loading (DeepSpeed#4344's
class) and a client warm-up scheduler DeepSpeed is not given (DeepSpeed#3875), each
FAILing where its state was lost; the clean check once more under
the deepspeed launcher (`-- deepspeed ...`). Two more jobs save
the same training under ZeRO-1 and ZeRO-3. Everything runs in one
module fixture. DeepSpeed JIT-builds its shm comm op with g++ on a rank's first
`init_distributed`: the fixture builds it once, into $TORCH_EXTENSIONS_DIR when that
is set (CI can keep it between runs) or else a directory of this test session.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")

from trainparity.checkpoints import load_checkpoint_directory, load_deepspeed  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "fixtures" / "deepspeed_zero_train.py"
SPLIT_STEP, TOTAL_STEP = 2, 5
CHECKS = {
    "clean": [],
    "no_optimizer_states": ["--fault-no-optimizer-states"],
    "no_lr_scheduler_states": ["--fault-no-lr-scheduler-states"],
    "module_only": ["--fault-module-only"],
    "data_position_not_saved": ["--fault-data-position-not-saved"],
    "config_lr_after_load": ["--fault-config-lr-after-load"],
    "client_scheduler_not_given": ["--fault-client-scheduler-not-given"],
}
OTHER_STAGES = (1, 3)
PARAMETERS = ["0.weight", "0.bias", "2.weight", "2.bias"]
# Checks (or stage runs) at once: each check runs its phases side by side already.
CONCURRENT_CHECKS = 2
BUILD_SHM_OP = (
    "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("deepspeed")
    project = root / "project"
    project.mkdir()
    shutil.copy(SCRIPT, project / "train.py")
    (root / "tmp").mkdir()
    environment = {
        **os.environ,
        "DS_ACCELERATOR": "cpu",
        "OMP_NUM_THREADS": "1",
        "TORCH_EXTENSIONS_DIR": os.environ.get("TORCH_EXTENSIONS_DIR")
        or str(root / "torch_extensions"),
        # `torchrun` as the template's first word is looked up in the children's PATH.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "TMPDIR": str(root / "tmp"),
    }
    subprocess.run(
        [sys.executable, "-c", BUILD_SHM_OP], env=environment, check=True, capture_output=True
    )

    commands: dict[str, Callable[[], list[str]]] = {}
    for name, fault in CHECKS.items():
        commands[name] = functools.partial(
            list,
            (
                *(sys.executable, "-m", "trainparity", "resume", "--json", "--no-progress"),
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
        *(sys.executable, "-m", "trainparity", "resume", "--json", "--no-progress"),
        *("--sequential", "--split-step", str(SPLIT_STEP), "--total-step", str(TOTAL_STEP)),
        *("--checkpoint", "{run_dir}/ck", "--work-dir", str(root / "launcher")),
        *("--", "deepspeed", "--num_gpus", "2", "--master_port", str(_free_port())),
        *("{cwd}/train.py", "--checkpoint", "{checkpoint}", "--end-step", "{end_step}"),
        *("--resume", "{resume_from?}"),
    ]
    for stage in OTHER_STAGES:
        commands[f"stage{stage}"] = functools.partial(
            list,
            (
                *(sys.executable, "-m", "torch.distributed.run", "--standalone"),
                *("--nproc-per-node=2", "train.py", "--stage", str(stage)),
                *("--checkpoint", str(root / f"stage{stage}"), "--end-step", str(TOTAL_STEP)),
            ),
        )
    done: dict = {"root": root}
    done.update(_run_a_few_at_a_time(commands, cwd=project, env=environment))
    return done


def _run_a_few_at_a_time(
    commands: dict[str, Callable[[], list[str]]], *, cwd: Path, env: dict[str, str]
) -> dict[str, tuple[int, str, str]]:
    """Each command's (returncode, stdout, stderr), at most CONCURRENT_CHECKS running at once.

    A check runs up to three two-rank phases at once; all ten commands at once would put
    some 50 processes on the suite's two cores and starve the tests of the other worker.
    Output goes to files, so a command that writes much never waits on a pipe nobody reads.
    """
    waiting = list(commands.items())
    running: dict[str, tuple[subprocess.Popen, Path]] = {}
    done: dict[str, tuple[int, str, str]] = {}
    deadline = time.monotonic() + 1800
    try:
        while waiting or running:
            while waiting and len(running) < CONCURRENT_CHECKS:
                name, command = waiting.pop(0)
                output = cwd.parent / "output" / name
                output.mkdir(parents=True)
                with (output / "stdout").open("w") as stdout, (output / "stderr").open("w") as err:
                    process = subprocess.Popen(
                        command(), cwd=cwd, env=env, stdout=stdout, stderr=err
                    )
                running[name] = (process, output)
            for name, (process, output) in list(running.items()):
                if process.poll() is not None:
                    del running[name]
                    texts = [(output / part).read_text() for part in ("stdout", "stderr")]
                    done[name] = (process.returncode, *texts)
            assert time.monotonic() < deadline, f"still running after 30 min: {sorted(running)}"
            time.sleep(0.2)
    finally:
        # On a timeout, the others stop too: a check and torchrun end their ranks on SIGTERM.
        for process, _ in running.values():
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=60)
    return done


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _report(runs: dict, name: str) -> dict:
    returncode, stdout, stderr = runs[name]
    assert stdout, f"{name} exited {returncode} with no report: {stderr[-3000:]}"
    return json.loads(stdout)


def _differences(report: dict) -> dict[str, dict]:
    return {difference["path"]: difference for difference in report["all_differences"]}


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


def test_a_clean_zero2_resume_passes(runs):
    report = _report(runs, "clean")
    assert report["outcome"] == "PASS", report["message"]
    assert runs["clean"][0] == 0
    assert report["message"] == f"final states are exactly equivalent at step {TOTAL_STEP}"
    # Both ranks ran in every phase, under torchrun.
    for process in report["processes"]:
        assert [rank["rank"] for rank in process["ranks"]] == [0, 1], process


def test_a_clean_resume_under_the_deepspeed_launcher_passes(runs):
    report = _report(runs, "launcher")
    assert report["outcome"] == "PASS", report["message"]
    assert report["message"] == f"final states are exactly equivalent at step {TOTAL_STEP}"
    assert report["case"].startswith("deepspeed --num_gpus 2 --master_port ")


def test_loading_without_optimizer_states_fails_at_the_optimizer_state(runs):
    report = _report(runs, "no_optimizer_states")
    assert report["outcome"] == "FAIL" and runs["no_optimizer_states"][0] == 1
    differences = _differences(report)
    # The moments restart from zero and AdamW counts its steps again from the split.
    step = differences['optimizer.state["0.weight"].step']
    assert "values=[5.0]" in step["baseline"] and "values=[3.0]" in step["candidate"]
    for name in PARAMETERS:
        assert f'optimizer.state["{name}"].exp_avg' in differences
        assert f'fp32["{name}"]' in differences
    # The scheduler was restored: its position and the learning rate agree.
    assert "lr_scheduler.last_batch_iteration" not in differences
    assert "optimizer.param_groups[0].lr" not in differences


def test_loading_without_lr_scheduler_states_fails_at_the_scheduler(runs):
    report = _report(runs, "no_lr_scheduler_states")
    assert report["outcome"] == "FAIL" and runs["no_lr_scheduler_states"][0] == 1
    differences = _differences(report)
    # WarmupLR starts its warm-up again: 3 steps after the split instead of 5 in all.
    position = differences["lr_scheduler.last_batch_iteration"]
    assert (position["baseline"], position["candidate"]) == (
        str(TOTAL_STEP - 1),
        str(TOTAL_STEP - 3),
    )
    assert "optimizer.param_groups[0].lr" in differences
    # The optimizer's own state was restored: its step count agrees.
    assert not [path for path in differences if path.endswith(".step")]


def test_loading_the_module_only_fails_at_the_engine_counters_optimizer_and_scheduler(runs):
    report = _report(runs, "module_only")
    assert report["outcome"] == "FAIL" and runs["module_only"][0] == 1
    differences = _differences(report)
    # DeepSpeed's own step counter restarts with the optimizer and the scheduler.
    steps = differences["global_steps"]
    assert (steps["baseline"], steps["candidate"]) == (
        str(TOTAL_STEP),
        str(TOTAL_STEP - SPLIT_STEP),
    )
    assert {
        "global_samples",
        "lr_scheduler.last_batch_iteration",
        'optimizer.state["0.weight"].step',
    } <= set(differences)


def test_a_data_position_not_saved_fails_at_the_first_repeated_sample_of_each_rank(runs):
    report = _report(runs, "data_position_not_saved")
    assert report["outcome"] == "FAIL" and runs["data_position_not_saved"][0] == 1
    assert (
        report["message"]
        == f"first observed divergence at step {TOTAL_STEP}: coverage.epoch0.rank0"
    )
    primary = report["primary_difference"]
    assert primary["reason"] == "sample_repeated"
    assert (
        "consumed again" in primary["candidate"]
        and "candidate_resume's position 0" in primary["candidate"]
    )
    differences = _differences(report)
    assert differences["coverage.epoch0.rank1"]["reason"] == "sample_repeated"
    # The checkpoint itself was whole: the counters and the scheduler agree.
    assert not {"global_steps", "lr_scheduler.last_batch_iteration"} & set(differences)


def test_the_configured_lr_put_back_after_loading_fails_at_the_weights_it_stepped(runs):
    report = _report(runs, "config_lr_after_load")
    assert report["outcome"] == "FAIL" and runs["config_lr_after_load"][0] == 1
    assert report["message"] == f'first observed divergence at step {TOTAL_STEP}: fp32["0.bias"]'
    # The step after the split ran at the configured 0.05, not at the restored warm-up's rate:
    # the weights it moved differ, and the moments of the steps after it. The restored WarmupLR
    # set its own rate again at its next step, so the scheduler, the final learning rate, the
    # optimizer's step count and DeepSpeed's counters agree: only the weights and moments differ.
    assert set(_differences(report)) == _weights_and_moments()


def test_a_client_scheduler_deepspeed_is_not_given_restarts_its_warmup(runs):
    report = _report(runs, "client_scheduler_not_given")
    assert report["outcome"] == "FAIL" and runs["client_scheduler_not_given"][0] == 1
    differences = _differences(report)
    # The linear warm-up of 6 steps counted 5 steps without a resume, 3 after it.
    lr = differences["optimizer.param_groups[0].lr"]
    assert (float(lr["baseline"]), float(lr["candidate"])) == pytest.approx((0.05, 0.05 * 4 / 6))
    # DeepSpeed had no scheduler to save (both checkpoints hold none) and restored the
    # optimizer's step count: the learning rate, and the weights and moments it moved, differ.
    assert set(differences) == {"optimizer.param_groups[0].lr", *_weights_and_moments()}


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


@pytest.mark.parametrize("stage", OTHER_STAGES)
def test_zero1_and_zero3_checkpoints_read_as_the_same_training(runs, stage):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    returncode, _stdout, stderr = runs[f"stage{stage}"]
    assert returncode == 0, stderr[-3000:]
    directory = runs["root"] / f"stage{stage}"
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
