"""DeepSpeed ZeRO-2 on 2 gloo CPU ranks: the deepspeed launcher, and a client scheduler it is not given.

The example project's train.py (docs/examples/deepspeed_project/) checked by two whole
checks, two at a time: the clean resume under DeepSpeed's own launcher (`-- deepspeed
--num_gpus 2 --master_port PORT ...`, PASS), and under torchrun with a client warm-up
scheduler that deepspeed.initialize is not given (`--fault client-scheduler-not-given`,
DeepSpeed#3875: FAIL at the first step after loading, at exactly the learning rate).
That fault changes the uninterrupted runs too (the client's LambdaLR instead of the
config's WarmupLR), so it runs its own baselines, unlike the faults of
test_deepspeed.py. The shm op is built as there.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

pytest.importorskip("deepspeed")

from tests.deepspeed_ops import DEEPSPEED_PRELOADS  # noqa: E402
from tests.deepspeed_project import (  # noqa: E402
    CONCURRENT_CHECKS,
    RESUME,
    SPLIT_STEP,
    TOTAL_STEP,
    differences_at_first_step,
    failed,
    final_differences,
    prepared,
    template_check,
    weights_and_moments,
)
from tests.few_at_a_time import report_of, run_a_few_at_a_time  # noqa: E402
from tests.shared_baselines import with_options  # noqa: E402

pytestmark = pytest.mark.warm_preload(*DEEPSPEED_PRELOADS)

CLIENT_SCHEDULER = "client-scheduler-not-given"


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> tuple[Path, Path, dict[str, str]]:
    return prepared(tmp_path_factory, "deepspeed_launcher")


@pytest.fixture(scope="module")
def runs(project) -> dict:
    root, cwd, environment = project
    # The deepspeed launcher's ranks meet at its fixed --master_port, which trainparity cannot
    # tell apart per phase: the phases run one after another (--sequential), on a port that
    # was free a moment before the check starts.
    commands = {
        "launcher": lambda: [
            *RESUME,
            *("--sequential", "--split-step", str(SPLIT_STEP), "--total-step", str(TOTAL_STEP)),
            *("--checkpoint", "{run_dir}/ck", "--work-dir", str(root / "launcher")),
            *("--", "deepspeed", "--num_gpus", "2", "--master_port", str(_free_port())),
            *("{cwd}/train.py", "--checkpoint", "{checkpoint}", "--end-step", "{end_step}"),
            *("--resume", "{resume_from?}"),
        ],
        CLIENT_SCHEDULER: with_options(
            template_check(("--fault", CLIENT_SCHEDULER)),
            *("--work-dir", str(root / CLIENT_SCHEDULER)),
        ),
    }
    # The launcher's check starts first, as a process of its own: its phases (the deepspeed
    # launcher forked warm, its launch.py and ranks forked from their zygotes) run on while the
    # client scheduler's check runs here, on the worker's warm servers (tests/cli_here.py).
    done: dict = {"root": root}
    done.update(
        run_a_few_at_a_time(
            commands, cwd=cwd, env=environment, at_once=CONCURRENT_CHECKS, here={CLIENT_SCHEDULER}
        )
    )
    return done


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_clean_resume_under_the_deepspeed_launcher_passes(runs):
    report = report_of(runs, "launcher")
    assert report["outcome"] == "PASS", report["message"]
    # Every phase's launcher forked warm (test_warm_start.py shows its launch.py and ranks are).
    assert report["environment"]["child_start"]["fresh"] == {}, report["environment"]["child_start"]
    assert report["message"] == f"final states are exactly equivalent at step {TOTAL_STEP}"
    assert report["case"].startswith("deepspeed --num_gpus 2 --master_port ")


def test_a_client_scheduler_deepspeed_is_not_given_fails_at_the_first_step_after_loading(runs):
    report = failed(runs, CLIENT_SCHEDULER)
    # load_checkpoint restored the optimizer's learning rate; the warm-up's next step
    # counts from zero: 6-step linear warm-up, 0.05 * 4/6 without a resume, 0.05 * 2/6 after.
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP + 1}: rank0.optimizer.param_groups[0].lr"
    )
    lr = differences_at_first_step(report)["rank0.optimizer.param_groups[0].lr"]
    assert (float(lr["baseline"]), float(lr["candidate"])) == pytest.approx(
        (0.05 * 4 / 6, 0.05 * 2 / 6)
    )
    assert set(final_differences(report)) == {
        "optimizer.param_groups[0].lr",
        *weights_and_moments(),
    }
