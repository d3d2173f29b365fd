"""DeepSpeed ZeRO-1, -2 and -3 checkpoints of one training, and one rank's state against two.

Plain torchrun jobs of docs/examples/deepspeed_project/train.py, two at a time, with no
check around them (forked from the worker's warm servers, ranks included: what is
asserted is what they saved, not how they started): the same training (seeds, data, 5
steps) saved under ZeRO-1, ZeRO-2 (its engine state recorded on both ranks) and ZeRO-3,
each read by load_deepspeed as DeepSpeed's own zero_to_fp32 reads it and as the same
training up to reduction order; and the initial state recorded on 1 rank, whose whole
parameters equal the 2-rank recording's fragments reassembled. The checks of the project
are in test_deepspeed.py (and _zero3, _launcher, _trainer); the shm op is built as
there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("deepspeed")

from trainparity._internal.recording.reader import read_recordings  # noqa: E402
from trainparity._internal.state.reassembly import global_state  # noqa: E402
from trainparity.checkpoints import load_deepspeed  # noqa: E402

from tests.deepspeed_ops import DEEPSPEED_PRELOADS  # noqa: E402
from tests.deepspeed_project import (  # noqa: E402
    CONCURRENT_CHECKS,
    PARAMETERS,
    TORCHRUN,
    TOTAL_STEP,
    prepared,
)
from tests.few_at_a_time import run_a_few_at_a_time  # noqa: E402

pytestmark = pytest.mark.warm_preload(*DEEPSPEED_PRELOADS)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    return prepared(tmp_path_factory, "deepspeed_stages")


@pytest.fixture(scope="module")
def runs(project) -> dict:
    root, cwd, environment = project

    def job(name: str, ranks: int, *options: str, recorded: bool = False) -> list[str]:
        record = ("env", f"TRAINPARITY_RECORD={root / f'{name}_recording'}") if recorded else ()
        return [
            *record,
            *(*TORCHRUN, f"--nproc-per-node={ranks}", "train.py"),
            *("--checkpoint", str(root / name), *options),
        ]

    commands = {
        "stage3": job("stage3", 2, "--end-step", str(TOTAL_STEP), "--stage", "3"),
        "stage2": job("stage2", 2, "--end-step", str(TOTAL_STEP), recorded=True),
        "stage1": job("stage1", 2, "--end-step", str(TOTAL_STEP), "--stage", "1"),
        # The initial state on 1 rank, recorded: its fragments are whole parameters.
        "one_rank": job("one_rank", 1, "--end-step", "0", recorded=True),
    }
    done = run_a_few_at_a_time(
        commands, cwd=cwd, env=environment, at_once=CONCURRENT_CHECKS, warm=True
    )
    for name, (returncode, _stdout, stderr) in done.items():
        assert returncode == 0, f"{name}: {stderr[-3000:]}"
    return {"root": root, **done}


@pytest.mark.parametrize("stage", [1, 3])
def test_zero1_and_zero3_checkpoints_read_as_the_same_training(runs, stage):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    directory = runs["root"] / f"stage{stage}"
    state, zero2 = load_deepspeed(directory), load_deepspeed(runs["root"] / "stage2")
    theirs = get_fp32_state_dict_from_zero_checkpoint(str(directory))
    assert state["zero"]["stage"] == stage and zero2["zero"]["stage"] == 2
    for name in PARAMETERS:
        assert torch.equal(state["fp32"][name], theirs[name]), name
        # The same seeds and data under another stage: equal up to reduction order.
        torch.testing.assert_close(state["fp32"][name], zero2["fp32"][name])
        for key, value in zero2["optimizer"]["state"][name].items():
            torch.testing.assert_close(state["optimizer"]["state"][name][key], value)


def test_two_ranks_fragments_compare_on_names_with_one_rank_whole_parameters(runs):
    one = read_recordings(runs["root"] / "one_rank_recording")
    two = read_recordings(runs["root"] / "stage2_recording")
    assert sorted(two) == [0, 1]
    initial_one = global_state([one[0].steps[0].state]).as_dict()
    initial_two = global_state([two[rank].steps[0].state for rank in (0, 1)]).as_dict()
    assert one[0].steps[0].state.as_dict()["fp32"].as_dict()["0.weight"].shape == (32,)
    # ZeRO-2 on 2 ranks: each rank holds a fragment of the flat group, not whole parameters.
    assert two[0].steps[0].state.as_dict()["fp32"].as_dict()["0.weight"].shape == (26,)
    for name in PARAMETERS:
        assert torch.equal(
            initial_one["fp32"].as_dict()[name].to_tensor(),
            initial_two["fp32"].as_dict()[name].to_tensor(),
        ), name
