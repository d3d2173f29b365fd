"""The DeepSpeed example project as the test_deepspeed*.py modules run it: a copy, its checks.

docs/examples/deepspeed_project/ is copied into each module's directory (its checks write
nothing into the repository). Each module has its own module fixture, so that
pytest-xdist (`--dist loadfile`) spreads them over its workers; what each module proves
is in its docstring.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.cli_here import CLI
from tests.deepspeed_ops import deepspeed_environment
from tests.few_at_a_time import report_of

PROJECT = Path(__file__).resolve().parent.parent / "docs" / "examples" / "deepspeed_project"
SPLIT_STEP, TOTAL_STEP = 2, 5
PARAMETERS = ["0.weight", "0.bias", "2.weight", "2.bias"]
# Checks (or jobs) at once: each check runs its phases side by side already.
CONCURRENT_CHECKS = 2
RESUME = (*CLI, "resume", "--json", "--no-progress")
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone")


def copy_project(root: Path) -> Path:
    project = root / "project"
    shutil.copytree(
        PROJECT, project, ignore=shutil.ignore_patterns("__pycache__", ".trainparity-*")
    )
    return project


def template_check(script_options: Sequence[str] = ()) -> list[str]:
    """`trainparity resume` of train.py under torchrun on 2 ranks (no --work-dir: add one)."""
    return [
        *RESUME,
        *("--split-step", str(SPLIT_STEP), "--total-step", str(TOTAL_STEP)),
        *("--checkpoint", "{run_dir}/ck"),
        *("--", "torchrun", "--standalone", "--nproc-per-node=2", "{cwd}/train.py"),
        *("--checkpoint", "{checkpoint}", "--end-step", "{end_step}"),
        *("--resume", "{resume_from?}", *script_options),
    ]


def weights_and_moments() -> set[str]:
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


def differences_at_first_step(report: dict) -> dict[str, dict]:
    """The differences at the first divergent step of the recorded trajectories, by path."""
    return {difference["path"]: difference for difference in report["all_differences"]}


def final_differences(report: dict) -> dict[str, dict]:
    """The differences of the final checkpoints (load_deepspeed's paths), by path."""
    return {difference["path"]: difference for difference in report["final_state_differences"]}


def failed(runs: dict, name: str) -> dict:
    """Command `name`'s report, which must be a FAIL (exit status 1)."""
    report = report_of(runs, name)
    assert report["outcome"] == "FAIL" and runs[name][0] == 1, report["message"]
    return report


def assert_a_clean_resume_passed_step_by_step(runs: dict, name: str) -> None:
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


def assert_no_optimizer_states_failed_right_after_loading(runs: dict, name: str) -> None:
    report = failed(runs, name)
    # Right after load_checkpoint: AdamW holds no moments, and the learning rate is the one
    # WarmupLR had set before its first step (0), not the restored one.
    assert report["first_divergent_step"] == SPLIT_STEP
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP}: rank0.optimizer.param_groups[0].lr"
    )
    first = differences_at_first_step(report)
    assert float(first["rank0.optimizer.param_groups[0].lr"]["candidate"]) == 0.0
    moments = first['rank0.optimizer.state["0.weight"].exp_avg']
    assert moments["reason"] == "missing_candidate"
    assert "zero_fragment mesh 2" in moments["baseline"]
    # At the end, the moments restarted from zero and AdamW counted its steps from the split.
    step = final_differences(report)['optimizer.state["0.weight"].step']
    assert "values=[5.0]" in step["baseline"] and "values=[3.0]" in step["candidate"]
    assert "lr_scheduler.last_batch_iteration" not in final_differences(report)


def assert_the_configured_lr_put_back_failed_at_the_learning_rate(
    runs: dict, name: str, *, zero3: bool
) -> None:
    report = failed(runs, name)
    assert report["message"] == (
        f"first observed divergence at step {SPLIT_STEP}: rank0.optimizer.param_groups[0].lr"
    )
    first = differences_at_first_step(report)
    assert set(first) == {"rank0.optimizer.param_groups[0].lr"}
    assert float(first["rank0.optimizer.param_groups[0].lr"]["candidate"]) == 0.05
    # The restored WarmupLR set its own rate again at its next step: at the end, only the
    # weights and moments that the step after the split moved differ (ZeRO-3 saves no module
    # weights of its own: placeholders, equal).
    expected = weights_and_moments()
    if zero3:
        expected = {path for path in expected if not path.startswith("module")}
    assert set(final_differences(report)) == expected


def prepared(tmp_path_factory, name: str) -> tuple[Path, Path, dict[str, str]]:
    """A module's directory, its copy of the project and the checks' environment.

    The environment's shm op is built (or found built) first: a module fixture of its
    own calls this, so the build's time is not charged to the checks' fixture.
    """
    root = tmp_path_factory.mktemp(name)
    return root, copy_project(root), deepspeed_environment(tmp_path_factory, root)
